import pytest

pytestmark = pytest.mark.software

# The fused GRU equals torch.nn.GRU (outputs and gradients) and has its layout.
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.rp002a.fused_gru import FusedGRU, FusedGRUInputError, fused_gru

TOLERANCE = 1e-6  # float32, per the brief: outputs and gradients equal to 1e-6


def _pair(input_size, hidden, seed):
    generator = torch.Generator().manual_seed(seed)
    stock = torch.nn.GRU(input_size, hidden, batch_first=True)
    fused = FusedGRU(input_size, hidden)
    fused.reset_parameters(generator)
    stock.load_state_dict(fused.state_dict())
    return stock, fused


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


def _assert_equal_to_stock(batch, steps, input_size, hidden, seed, with_h0):
    stock, fused = _pair(input_size, hidden, seed)
    data = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, steps, input_size, generator=data)
    h0 = torch.randn(1, batch, hidden, generator=data) if with_h0 else None
    weights = (
        torch.randn(batch, steps, hidden, generator=data),
        torch.randn(1, batch, hidden, generator=data),
    )
    out_s, hn_s, grads_s = _run(stock, x, h0, weights)
    out_f, hn_f, grads_f = _run(fused, x, h0, weights)
    assert out_f.shape == out_s.shape and hn_f.shape == hn_s.shape
    pairs = {"output": (out_f, out_s), "h_n": (hn_f, hn_s)}
    pairs.update({f"grad {k}": (grads_f[k], grads_s[k]) for k in grads_s})
    assert set(grads_f) == set(grads_s)
    for name, (got, want) in pairs.items():
        assert got is not None, name
        scale = max(1.0, float(want.abs().max()))
        err = float((got - want).abs().max())
        assert err <= TOLERANCE * scale, f"{name}: max |fused - stock| = {err:.3g}"


@pytest.mark.parametrize(
    ("batch", "steps", "input_size", "hidden"),
    [(1, 1, 5, 64), (1, 17, 5, 64), (3, 1, 5, 8), (4, 9, 5, 8), (8, 40, 5, 64), (2, 6, 3, 1)],
)
@pytest.mark.parametrize("with_h0", [False, True])
def test_equal_to_nn_gru_outputs_and_gradients(batch, steps, input_size, hidden, with_h0):
    _assert_equal_to_stock(
        batch, steps, input_size, hidden, seed=batch * 1000 + steps, with_h0=with_h0
    )


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 5),
    steps=st.integers(1, 12),
    input_size=st.integers(1, 6),
    hidden=st.integers(1, 9),
    seed=st.integers(0, 2**31 - 1),
    with_h0=st.booleans(),
)
def test_equal_to_nn_gru_property(batch, steps, input_size, hidden, seed, with_h0):
    _assert_equal_to_stock(batch, steps, input_size, hidden, seed, with_h0)


def test_gradcheck_float64():
    # Independent of nn.GRU: finite differences of the hand-written backward.
    gen = torch.Generator().manual_seed(7)
    batch, steps, features, hidden = 2, 4, 3, 5
    args = [
        torch.randn(batch, steps, features, generator=gen, dtype=torch.float64),
        torch.randn(batch, hidden, generator=gen, dtype=torch.float64),
        torch.randn(3 * hidden, features, generator=gen, dtype=torch.float64),
        torch.randn(3 * hidden, hidden, generator=gen, dtype=torch.float64),
        torch.randn(3 * hidden, generator=gen, dtype=torch.float64),
        torch.randn(3 * hidden, generator=gen, dtype=torch.float64),
    ]
    args = [a.requires_grad_(True) for a in args]
    assert torch.autograd.gradcheck(fused_gru, args, eps=1e-6, atol=1e-7)


def test_only_last_state_used_and_no_input_grad():
    # grad_output for the sequence is zeros; x needs no grad (one-hot input case).
    stock, fused = _pair(5, 6, seed=3)
    x = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(4))
    for module in (stock, fused):
        module.zero_grad()
        module(x)[1].sum().backward()
    for (name, p_s), p_f in zip(stock.named_parameters(), fused.parameters()):
        torch.testing.assert_close(p_f.grad, p_s.grad, rtol=1e-6, atol=1e-6, msg=name)


def test_parameter_names_shapes_and_init_bounds():
    stock = torch.nn.GRU(5, 64, batch_first=True)
    fused = FusedGRU(5, 64)
    assert [(n, p.shape) for n, p in fused.named_parameters()] == [
        (n, p.shape) for n, p in stock.named_parameters()
    ]
    fused.reset_parameters(torch.Generator().manual_seed(0))
    bound = 1.0 / math.sqrt(64)
    for name, parameter in fused.state_dict().items():
        assert float(parameter.abs().max()) <= bound, name
        # uniform on (-b, b): the spread is close to the full interval
        assert float(parameter.max() - parameter.min()) > bound, name


def test_same_generator_draws_same_weights_as_stock_order():
    # nn.GRU.reset_parameters draws U(-1/sqrt(H), 1/sqrt(H)) over parameters() in order;
    # doing that by hand with a generator must give FusedGRU.reset_parameters's draw.
    fused = FusedGRU(5, 8)
    fused.reset_parameters(torch.Generator().manual_seed(11))
    stock = torch.nn.GRU(5, 8, batch_first=True)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for parameter in stock.parameters():
            parameter.uniform_(-1 / math.sqrt(8), 1 / math.sqrt(8), generator=gen)
    for (name, a), b in zip(fused.state_dict().items(), stock.state_dict().values()):
        assert torch.equal(a, b), name


def test_forward_is_deterministic():
    _, fused = _pair(5, 16, seed=1)
    x = torch.randn(4, 20, 5, generator=torch.Generator().manual_seed(2))
    a, _ = fused(x)
    b, _ = fused(x)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("x_shape", "hx_shape"),
    [((7, 5), None), ((2, 3, 5), (2, 3)), ((2, 3, 5), (1, 3, 4)), ((2, 0, 5), None)],
)
def test_bad_shapes_raise(x_shape, hx_shape):
    fused = FusedGRU(5, 4)
    hx = None if hx_shape is None else torch.zeros(hx_shape)
    with pytest.raises(FusedGRUInputError):
        fused(torch.zeros(x_shape), hx)


@pytest.mark.parametrize("value", [0, -3, 2.0, True])
def test_bad_sizes_raise(value):
    with pytest.raises(FusedGRUInputError, match="hidden_size"):
        FusedGRU(5, value)


@pytest.mark.parametrize(("batch", "steps"), [(1, 1), (5, 13)])
def test_no_grad_path_is_bit_identical_to_graph_path(batch, steps):
    # fused_gru skips the autograd Function (scratch buffers) when no graph is needed;
    # the arithmetic is the same, so outputs must match bit for bit.
    _, fused = _pair(5, 16, seed=8)
    x = torch.randn(batch, steps, 5, generator=torch.Generator().manual_seed(9))
    with_graph, last_graph = fused(x)
    assert with_graph.requires_grad
    with torch.no_grad():
        without, last = fused(x)
    assert not without.requires_grad
    assert torch.equal(with_graph.detach(), without)
    assert torch.equal(last_graph.detach(), last)


def test_workspace_reuse_and_interleaved_graphs_give_fresh_results():
    # Reference: the functional form with fresh buffers for every call.
    _, fused = _pair(5, 12, seed=21)
    gen = torch.Generator().manual_seed(22)
    xa, xb = torch.randn(3, 10, 5, generator=gen), torch.randn(3, 10, 5, generator=gen)
    wa, wb = torch.randn(3, 10, 12, generator=gen), torch.randn(3, 10, 12, generator=gen)
    params = list(fused.parameters())

    def reference(x, w):
        out, _ = fused_gru(x, torch.zeros(3, 12), *params)
        return torch.autograd.grad((out * w).sum(), params)

    want_a, want_b = reference(xa, wa), reference(xb, wb)
    # two graphs alive at once share the module's pool: backward in reverse order
    out_a, _ = fused(xa)
    out_b, _ = fused(xb)
    got_b = torch.autograd.grad((out_b * wb).sum(), params)
    got_a = torch.autograd.grad((out_a * wa).sum(), params)
    # and again, now reusing released workspaces
    out_a2, _ = fused(xa)
    got_a2 = torch.autograd.grad((out_a2 * wa).sum(), params)
    for got, want in ((got_a, want_a), (got_b, want_b), (got_a2, want_a)):
        for g, w in zip(got, want):
            assert torch.equal(g, w)


def test_module_second_backward_through_same_graph_raises():
    _, fused = _pair(5, 4, seed=5)
    output, _ = fused(torch.randn(2, 3, 5))
    loss = output.sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()
