import pytest

# Builds the kernel on first run (about 20-60 s): slow, but software, so CI runs it.
pytestmark = [pytest.mark.software, pytest.mark.slow]

# The compiled GRU equals torch.nn.GRU (outputs and gradients, float32, to 1e-6),
# passes float64 gradcheck, is bit-for-bit deterministic, has nn.GRU's layout, and
# trains a tiny B2 exactly like the fused implementation.
import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.rp002a.fused_gru import FusedGRU
from prereg.rp002a.gru_kernel import (
    CompiledGRU,
    CompiledGRUInputError,
    compiled_gru,
    load_kernel,
)
from prereg.rp002a.models import build_gru, build_model
from prereg.rp002a.training import TrainConfig, train

TOLERANCE = 1e-6  # the brief: outputs and gradients equal nn.GRU's to 1e-6 in float32


@pytest.fixture(scope="module", autouse=True)
def kernel():
    return load_kernel()  # a build failure fails the module (never skipped)


@pytest.fixture(autouse=True)
def one_thread():
    # Stages train with one thread per worker; on a busy 2-core machine the
    # intra-op thread pool also makes tiny ops cost milliseconds.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _pair(input_size, hidden, seed, scale=None):
    generator = torch.Generator().manual_seed(seed)
    compiled = CompiledGRU(input_size, hidden)
    compiled.reset_parameters(generator)
    if scale is not None:  # input path only: saturates the gates, keeps h_t stable
        with torch.no_grad():
            compiled.weight_ih_l0.mul_(scale)
            compiled.bias_ih_l0.mul_(scale)
    stock = torch.nn.GRU(input_size, hidden, batch_first=True)
    stock.load_state_dict(compiled.state_dict())
    return stock, compiled


def _run(module, x, h0, weights):
    """Outputs and gradients of a loss that uses both the sequence and h_n."""
    x = x.clone().requires_grad_(True)
    hx = None if h0 is None else h0.clone().requires_grad_(True)
    output, h_n = module(x, hx)
    w_out, w_last = weights
    loss = (output * w_out).sum() / output.numel() + (h_n * w_last).sum() / h_n.numel()
    loss.backward()
    grads = {"x": x.grad, **{name: p.grad for name, p in module.named_parameters()}}
    if hx is not None:
        grads["h0"] = hx.grad
    return output.detach(), h_n.detach(), grads


def _inputs(batch, steps, input_size, hidden, seed, with_h0, one_hot=False):
    data = torch.Generator().manual_seed(seed + 1)
    if one_hot:
        x = F.one_hot(torch.randint(0, input_size, (batch, steps), generator=data), input_size)
        x = x.float()
    else:
        x = torch.randn(batch, steps, input_size, generator=data)
    h0 = torch.randn(1, batch, hidden, generator=data) if with_h0 else None
    weights = (
        torch.randn(batch, steps, hidden, generator=data),
        torch.randn(1, batch, hidden, generator=data),
    )
    return x, h0, weights


def _assert_equal_to_stock(batch, steps, input_size, hidden, seed, with_h0, **kw):
    scale = kw.pop("scale", None)
    stock, compiled = _pair(input_size, hidden, seed, scale)
    x, h0, weights = _inputs(batch, steps, input_size, hidden, seed, with_h0, **kw)
    out_s, hn_s, grads_s = _run(stock, x, h0, weights)
    out_c, hn_c, grads_c = _run(compiled, x, h0, weights)
    assert out_c.shape == out_s.shape and hn_c.shape == hn_s.shape
    assert set(grads_c) == set(grads_s)
    pairs = {"output": (out_c, out_s), "h_n": (hn_c, hn_s)}
    pairs.update({f"grad {k}": (grads_c[k], grads_s[k]) for k in grads_s})
    for name, (got, want) in pairs.items():
        assert got is not None and got.dtype == want.dtype == torch.float32, name
        scale_ = max(1.0, float(want.abs().max()))
        err = float((got - want).abs().max())
        assert err <= TOLERANCE * scale_, f"{name}: max |compiled - stock| = {err:.3g}"


@pytest.mark.parametrize(
    ("batch", "steps", "input_size", "hidden"),
    [(1, 1, 5, 64), (1, 17, 5, 64), (3, 1, 5, 8), (9, 9, 5, 8), (8, 40, 5, 64), (2, 6, 3, 1),
     (17, 5, 4, 11), (32, 129, 5, 64)],
)  # fmt: skip
@pytest.mark.parametrize("with_h0", [False, True])
def test_equal_to_nn_gru_outputs_and_gradients(batch, steps, input_size, hidden, with_h0):
    # (32, 129, 5, 64) is the plan's shape (batch, episode length, symbols, B2 hidden);
    # odd sizes exercise the row (8) and column (32) tails of the step GEMM.
    one_hot = input_size == 5
    _assert_equal_to_stock(
        batch, steps, input_size, hidden, batch * 1000 + steps, with_h0, one_hot=one_hot
    )


def test_saturated_gates_equal_nn_gru():
    # Input weights x 60 push pre-activations to about +-100 (beyond the kernel's
    # exp clamp at 87): the clamped exp and tanh = 2 sigmoid(2a) - 1 must still
    # agree with torch to 1e-6. (Scaling W_hh instead makes h_t chaotic: then even
    # nn.GRU float32 differs from float64 by 1e-4.)
    _assert_equal_to_stock(4, 30, 5, 16, seed=7, with_h0=True, scale=60.0)


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 11),
    steps=st.integers(1, 12),
    input_size=st.integers(1, 6),
    hidden=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
    with_h0=st.booleans(),
)
def test_equal_to_nn_gru_property(batch, steps, input_size, hidden, seed, with_h0):
    _assert_equal_to_stock(batch, steps, input_size, hidden, seed, with_h0)


@pytest.mark.parametrize(("batch", "steps", "hidden"), [(1, 1, 1), (3, 4, 5), (9, 2, 12)])
def test_float64_gradcheck(batch, steps, hidden):
    # Independent of nn.GRU: finite differences of the float64 kernel itself.
    # (9, 2, 12): 9 rows = one 8-row GEMM block + a tail; 3H = 36 = one 32-column
    # block + a tail.
    generator = torch.Generator().manual_seed(batch + steps + hidden)

    def make(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_(True)

    args = (
        make(batch, steps, 3), make(batch, hidden), make(3 * hidden, 3),
        make(3 * hidden, hidden), make(3 * hidden), make(3 * hidden),
    )  # fmt: skip
    assert torch.autograd.gradcheck(compiled_gru, args, eps=1e-6, atol=1e-7, rtol=1e-5)


def _grads_once(module, x, weights):
    module.zero_grad(set_to_none=True)
    output, h_n = module(x)
    loss = (output * weights[0]).sum() + (h_n * weights[1]).sum()
    loss.backward()
    return [output.detach()] + [p.grad.clone() for p in module.parameters()]


def _same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.numpy().tobytes() == b.numpy().tobytes()


def test_bit_for_bit_deterministic_at_one_thread():
    assert torch.get_num_threads() == 1  # the one_thread fixture
    _, compiled = _pair(5, 64, seed=3)
    x, _, weights = _inputs(32, 129, 5, 64, seed=3, with_h0=False, one_hot=True)
    first = _grads_once(compiled, x, weights)
    for _ in range(2):
        again = _grads_once(compiled, x, weights)
        assert all(_same_bytes(a, b) for a, b in zip(first, again))
    # a freshly built module with the same weights gives the same bytes too
    _, other = _pair(5, 64, seed=3)
    assert all(_same_bytes(a, b) for a, b in zip(first, _grads_once(other, x, weights)))
    with torch.no_grad():  # the graph-free path computes the same bits
        output, _ = compiled(x)
    assert _same_bytes(output, first[0])


def test_repeated_backward_with_retained_graph():
    _, compiled = _pair(3, 6, seed=11)
    x, _, _ = _inputs(4, 7, 3, 6, seed=11, with_h0=False)
    output, h_n = compiled(x)
    loss = output.square().sum() + h_n.sum()
    loss.backward(retain_graph=True)
    first = [p.grad.clone() for p in compiled.parameters()]
    compiled.zero_grad()
    loss.backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(first, compiled.parameters()))


def test_layout_and_initialisation_match_nn_gru_and_fused():
    compiled = build_gru("compiled", 5, 64)
    assert isinstance(compiled, CompiledGRU)
    stock = torch.nn.GRU(5, 64, batch_first=True)
    names = [(n, tuple(p.shape)) for n, p in compiled.named_parameters()]
    assert names == [(n, tuple(p.shape)) for n, p in stock.named_parameters()]
    sizes = {"n_symbols": 5, "n_targets": 4, "hidden": 16}
    fused = build_model("B2", sizes, "fused", generator=torch.Generator().manual_seed(5))
    comp = build_model("B2", sizes, "compiled", generator=torch.Generator().manual_seed(5))
    fused_state, comp_state = fused.state_dict(), comp.state_dict()
    assert list(fused_state) == list(comp_state)
    assert all(torch.equal(fused_state[k], comp_state[k]) for k in fused_state)
    assert isinstance(comp.gru, FusedGRU)  # so initialise_parameters treats it as a GRU


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda a: {**a, "x": a["x"][0]}, "x must be batch-first"),
        (lambda a: {**a, "x": a["x"][:, :0]}, "T >= 1"),
        (lambda a: {**a, "h0": a["h0"][:1]}, "h0 must have shape"),
        (lambda a: {**a, "weight_ih": a["weight_ih"][:, :2]}, "weight_ih must have shape"),
        (lambda a: {**a, "bias_hh": a["bias_hh"][1:]}, "bias_hh must have shape"),
        (lambda a: {**a, "h0": a["h0"].double()}, "h0 has dtype torch.float64"),
        (lambda a: {k: v.half() for k, v in a.items()}, "use float32 or float64"),
        (lambda a: {**a, "bias_ih": [0.0]}, "bias_ih must be a torch.Tensor"),
    ],
)
def test_bad_input_refused(mutate, match):
    args = {
        "x": torch.zeros(2, 3, 4), "h0": torch.zeros(2, 5),
        "weight_ih": torch.zeros(15, 4), "weight_hh": torch.zeros(15, 5),
        "bias_ih": torch.zeros(15), "bias_hh": torch.zeros(15),
    }  # fmt: skip
    with pytest.raises(CompiledGRUInputError, match=match):
        compiled_gru(**mutate(args))


def test_module_refuses_bad_hx():
    module = CompiledGRU(3, 4)
    with pytest.raises(CompiledGRUInputError, match=r"hx must have shape \(1, B, H\)"):
        module(torch.zeros(2, 5, 3), torch.zeros(2, 4))
    assert issubclass(CompiledGRUInputError, ValueError)


def _toy(seed, episodes, steps=12):
    """Visible symbols (0..3) are the target; an erasure (4) repeats the previous one."""
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 5, size=(episodes, steps)).astype(np.uint8)
    targets = np.zeros_like(obs)
    previous = np.zeros(episodes, dtype=np.uint8)
    for t in range(steps):
        previous = np.where(obs[:, t] < 4, obs[:, t], previous)
        targets[:, t] = previous
    return obs, targets


def test_tiny_b2_trains_like_fused():
    # Same generators and data: compiled and fused select the same epoch and
    # their per-epoch losses agree to 1e-6 (they differ only in rounding).
    config = TrainConfig.from_mapping({
        "learning_rate": 0.02, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8,
        "batch_size": 16, "grad_clip_norm": 1.0, "probability_clip": 1e-8,
        "max_epochs": 12, "patience": 3, "final_20_window": 3, "final_five_window": 2,
    })  # fmt: skip
    sizes = {"n_symbols": 5, "n_targets": 4, "hidden": 8}
    data = (*_toy(0, 96), *_toy(1, 32))
    results = {}
    for implementation in ("fused", "compiled"):
        model = build_model("B2", sizes, implementation)
        results[implementation] = train(
            model, *data, config,
            init_generator=torch.Generator().manual_seed(0),
            order_generator=np.random.default_rng(0),
        )  # fmt: skip
    fused, compiled = results["fused"], results["compiled"]
    assert compiled.best_epoch == fused.best_epoch
    assert compiled.epochs_run == fused.epochs_run and compiled.stop_reason == fused.stop_reason
    assert fused.trace[-1].validation_loss < fused.trace[0].validation_loss  # it learned
    for a, b in zip(compiled.trace, fused.trace):
        assert abs(a.train_loss - b.train_loss) <= 1e-6
        assert abs(a.validation_loss - b.validation_loss) <= 1e-6
    assert abs(compiled.best_validation_loss - fused.best_validation_loss) <= 1e-6


def test_kernel_info_is_recorded(kernel):
    info = kernel.to_dict()
    assert info["library"].endswith(".so") and len(info["build_key"]) == 64
    assert info["torch_version"] == torch.__version__
    assert load_kernel() is kernel  # loaded once per process


def test_fresh_build_then_reuse(tmp_path):
    # What install.sh does on a fresh machine: build into an empty cache, then a
    # second process loads the recorded library without rebuilding.
    import os
    import subprocess
    import sys

    env = {**os.environ, "PREREG_TORCH_EXTENSIONS_DIR": str(tmp_path)}
    command = [sys.executable, "-m", "prereg.rp002a.gru_kernel", "--build"]

    def run():
        return subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=900, check=False
        )

    first = run()
    assert first.returncode == 0, first.stderr
    assert "compiled GRU kernel built:" in first.stdout and str(tmp_path) in first.stdout
    assert len(list(tmp_path.rglob("prereg_build.json"))) == 1
    second = run()
    assert second.returncode == 0, second.stderr
    assert "compiled GRU kernel already built:" in second.stdout
