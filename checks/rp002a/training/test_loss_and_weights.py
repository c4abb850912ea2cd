import pytest

pytestmark = pytest.mark.software

# Clipped log loss against a float64 numpy reference; probabilities; the
# deterministic weights format and exact replay of predictions from reloaded weights.
import json
import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from prereg.rp002a.models import build_model
from prereg.rp002a.training import (
    TrainInputError,
    WeightsFormatError,
    clipped_log_loss,
    load_weights,
    mean_clipped_log_loss,
    predict_probabilities,
    save_weights,
    weights_from_bytes,
    weights_to_bytes,
)

B2_SIZES = {"n_symbols": 5, "n_targets": 4, "hidden": 8}
logit_arrays = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=3, max_dims=3, min_side=1, max_side=6).map(lambda s: (*s[:2], 4)),
    elements=st.floats(-30, 30, width=32),
)


def _reference_loss(logits, targets, clip):
    """-log(max(softmax_y, clip)) in float64 with numpy (the protocol's formula)."""
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    p_y = np.take_along_axis(p, targets[..., None], -1)[..., 0]
    return -np.log(np.maximum(p_y, clip))


@settings(max_examples=100, deadline=None)
@given(logits=logit_arrays, seed=st.integers(0, 2**32 - 1),
       clip=st.sampled_from([1e-8, 1e-4, 0.1]))  # fmt: skip
def test_clipped_log_loss_matches_reference(logits, seed, clip):
    targets = np.random.default_rng(seed).integers(0, 4, size=logits.shape[:2])
    got = clipped_log_loss(torch.from_numpy(logits), torch.from_numpy(targets), clip).numpy()
    want = _reference_loss(logits, targets, clip)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.all(got <= -math.log(clip) * (1 + 1e-6))  # the clip bounds the loss


def test_clipped_log_loss_reference_values():
    # Hand values: uniform logits give log 4; a target with p ~ e^-40 is clipped at
    # -log(1e-8) = 18.420680743952367 (math.log).
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [40.0, 0.0, 0.0, 0.0]]])
    targets = torch.tensor([[2, 1]])
    loss = clipped_log_loss(logits, targets, 1e-8)
    torch.testing.assert_close(loss, torch.tensor([[math.log(4), 18.420680743952367]]))
    grad_logits = logits.clone().requires_grad_(True)
    clipped_log_loss(grad_logits, targets, 1e-8)[0, 1].backward()
    assert torch.count_nonzero(grad_logits.grad) == 0  # below the clip: zero gradient


def _model(seed):
    return build_model("B2", B2_SIZES, implementation="fused",
                       generator=torch.Generator().manual_seed(seed))  # fmt: skip


def test_predict_probabilities_shape_sum_and_mode():
    model = _model(0)
    model.train()
    obs = np.random.default_rng(0).integers(0, 5, size=(5, 7)).astype(np.uint8)
    probs = predict_probabilities(model, obs, chunk_episodes=2)
    assert probs.dtype == np.float32 and probs.shape == (5, 7, 4)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=0, atol=1e-6)
    assert model.training  # mode restored
    np.testing.assert_allclose(
        probs, predict_probabilities(model, obs, chunk_episodes=5), rtol=1e-6, atol=1e-7
    )
    with pytest.raises(TrainInputError, match="chunk_episodes"):
        predict_probabilities(model, obs, chunk_episodes=0)


def test_mean_loss_equals_mean_of_reference():
    model = _model(1)
    rng = np.random.default_rng(1)
    obs = rng.integers(0, 5, size=(6, 9)).astype(np.uint8)
    targets = rng.integers(0, 4, size=(6, 9)).astype(np.uint8)
    probs = predict_probabilities(model, obs).astype(np.float64)
    p_y = np.take_along_axis(probs, targets[..., None].astype(np.int64), -1)[..., 0]
    want = float(np.mean(-np.log(np.maximum(p_y, 1e-8))))
    got = mean_clipped_log_loss(model, obs, targets, 1e-8, chunk_episodes=4)
    assert got == pytest.approx(want, rel=1e-6)


state_dicts = st.dictionaries(
    st.text("abcdefghij._", min_size=1, max_size=12),
    st.sampled_from([np.float32, np.float64, np.int64]).flatmap(
        lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0))
    ),
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(state=state_dicts)
def test_weights_roundtrip_exact(state):
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}
    data = weights_to_bytes(tensors)
    back = weights_from_bytes(data)
    assert list(back) == sorted(tensors)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape
        assert back[name].numpy().tobytes() == tensor.numpy().tobytes()  # NaN-safe
    assert weights_to_bytes(back) == data  # stable under a second pass
    # insertion order does not matter
    assert weights_to_bytes(dict(reversed(list(tensors.items())))) == data


def test_weights_file_layout_reference():
    # Hand-built expected bytes for one float32 scalar tensor named "a" = 1.0.
    header = b'{"tensors":[{"dtype":"<f4","name":"a","shape":[]}]}'
    expected = (
        b"PREREG-WEIGHTS-1\n" + len(header).to_bytes(8, "little") + header
        + np.float32(1.0).tobytes()
    )  # fmt: skip
    assert weights_to_bytes({"a": torch.tensor(1.0)}) == expected
    assert json.loads(header)["tensors"][0]["name"] == "a"


def test_reloaded_weights_reproduce_predictions_exactly(tmp_path):
    model = _model(2)
    obs = np.random.default_rng(2).integers(0, 5, size=(4, 11)).astype(np.uint8)
    path_a, path_b = tmp_path / "a.weights", tmp_path / "b.weights"
    save_weights(model.state_dict(), path_a)
    save_weights(model.state_dict(), path_b)
    assert path_a.read_bytes() == path_b.read_bytes()
    fresh = _model(99)
    assert not np.array_equal(predict_probabilities(fresh, obs), predict_probabilities(model, obs))
    fresh.load_state_dict(load_weights(path_a))
    assert np.array_equal(predict_probabilities(fresh, obs), predict_probabilities(model, obs))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"not weights", "magic"),
        (b"PREREG-WEIGHTS-1\n" + (3).to_bytes(8, "little") + b"{x}", "unreadable"),
        (weights_to_bytes({"a": torch.zeros(3)})[:-1], "truncated"),
        (weights_to_bytes({"a": torch.zeros(3)}) + b"\0", "trailing"),
    ],
)
def test_corrupt_weights_refused(data, match):
    with pytest.raises(WeightsFormatError, match=match):
        weights_from_bytes(data)


def test_unsupported_dtype_refused():
    with pytest.raises(WeightsFormatError, match="state\\['a'\\]"):
        weights_to_bytes({"a": torch.zeros(2, dtype=torch.float16)})
