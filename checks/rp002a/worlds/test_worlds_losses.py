import pytest

pytestmark = pytest.mark.software

import math

import numpy as np
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from prereg.rp002a.losses import (
    LossInputError,
    clipped_log_loss,
    episode_mean_losses,
    paired_contrast,
    replicate_loss,
    target_probabilities,
)

CLIP = 1e-8


@st.composite
def predictions(draw: st.DrawFn, max_side: int = 5):
    """(probabilities [E, T, K] summing to 1, with exact zeros allowed; targets)."""
    e, t, k = (draw(st.integers(1, max_side)) for _ in range(3))
    k = max(k, 2)
    raw = draw(hnp.arrays(np.float64, (e, t, k), elements=st.floats(0.0, 1.0)))
    raw[..., 0] += raw.sum(axis=-1) == 0  # no all-zero row
    probs = raw / raw.sum(axis=-1, keepdims=True)
    targets = draw(hnp.arrays(np.int64, (e, t), elements=st.integers(0, k - 1)))
    return probs, targets


def test_hand_computed_losses() -> None:
    probs = np.array([[[0.5, 0.5], [1.0, 0.0]], [[0.25, 0.75], [0.1, 0.9]]])
    targets = np.array([[0, 1], [1, 0]])
    losses = clipped_log_loss(probs, targets, CLIP)
    # -ln 0.5, -ln 1e-8 (clipped zero), -ln 0.75, -ln 0.1.
    expected = [[math.log(2), -math.log(1e-8)], [-math.log(0.75), -math.log(0.1)]]
    np.testing.assert_allclose(losses, expected, rtol=1e-15)
    np.testing.assert_allclose(episode_mean_losses(probs, targets, CLIP), np.mean(expected, 1))
    summary = replicate_loss(probs, targets, CLIP)
    assert summary.mean == pytest.approx(np.mean(expected), rel=1e-15)


@settings(max_examples=100, deadline=None)
@given(data=predictions())
def test_loss_equals_torch_nll_of_clamped_probabilities(data: tuple) -> None:
    probs, targets = data
    reference = torch.nn.functional.nll_loss(
        torch.log(torch.clamp(torch.from_numpy(probs), min=CLIP)).reshape(-1, probs.shape[-1]),
        torch.from_numpy(targets).reshape(-1),
        reduction="none",
    ).reshape(targets.shape)
    np.testing.assert_allclose(
        clipped_log_loss(probs, targets, CLIP), reference.numpy(), rtol=1e-12
    )


@settings(max_examples=100, deadline=None)
@given(data=predictions(), clips=st.tuples(st.floats(1e-12, 0.9), st.floats(1e-12, 0.9)))
def test_loss_is_bounded_and_non_increasing_in_clip(data: tuple, clips: tuple) -> None:
    probs, targets = data
    low, high = sorted(clips)
    loss_low = clipped_log_loss(probs, targets, low)
    loss_high = clipped_log_loss(probs, targets, high)
    assert np.all(loss_high <= loss_low)
    assert np.all(loss_low >= 0) and np.all(loss_low <= -math.log(low) + 1e-12)


@settings(max_examples=100, deadline=None)
@given(data=predictions(), other=st.integers(0, 2**32))
def test_paired_contrast_properties(data: tuple, other: int) -> None:
    probs, targets = data
    rng = np.random.default_rng(other)
    alt = rng.dirichlet(np.ones(probs.shape[-1]), size=probs.shape[:2])
    a = episode_mean_losses(probs, targets, CLIP)
    b = episode_mean_losses(alt, targets, CLIP)
    ab, ba = paired_contrast(a, b), paired_contrast(b, a)
    np.testing.assert_allclose(ab.differences, -ba.differences)
    assert ab.mean == pytest.approx(a.mean() - b.mean(), abs=1e-12)
    assert paired_contrast(a, a).mean == 0.0
    # Episode weighting: the replicate mean equals the timepoint mean (equal T).
    assert replicate_loss(probs, targets, CLIP).mean == pytest.approx(
        clipped_log_loss(probs, targets, CLIP).mean(), abs=1e-12
    )


def test_float32_probabilities_are_accepted_and_computed_in_float64() -> None:
    probs = np.array([[[0.3, 0.7]]], dtype=np.float32)
    got = clipped_log_loss(probs, np.array([[1]]), CLIP)
    assert got.dtype == np.float64
    assert got[0, 0] == pytest.approx(-math.log(float(np.float32(0.7))), rel=1e-15)


@pytest.mark.parametrize(
    "probs, targets, clip, message",
    [
        (np.full((1, 2, 2), 0.5), np.array([[0, 2]]), CLIP, r"targets hold values in \[0, 2\]"),
        (np.full((1, 2, 2), 0.5), np.array([[0]]), CLIP, "targets has shape"),
        (np.full((1, 2, 2), 0.6), np.array([[0, 1]]), CLIP, "do not sum to 1"),
        (np.full((1, 2, 2), np.nan), np.array([[0, 1]]), CLIP, "finite"),
        (np.full((2, 2), 0.5), np.array([[0, 1]]), CLIP, "probabilities has shape"),
        (np.full((1, 2, 2), 0.5), np.array([[0, 1]]), 0.0, "clip=0.0"),
        (np.full((1, 2, 2), 0.5), np.array([[0, 1]]), 1.5, "clip=1.5"),
        (np.full((1, 2, 2), 0.5), np.array([[0.0, 1.0]]), CLIP, "targets has dtype"),
    ],
)
def test_bad_inputs_are_named(
    probs: np.ndarray, targets: np.ndarray, clip: float, message: str
) -> None:
    with pytest.raises(LossInputError, match=message):
        clipped_log_loss(probs, targets, clip)


def test_paired_contrast_errors() -> None:
    with pytest.raises(LossInputError, match=r"shape \(3,\).*shape \(2,\)"):
        paired_contrast(np.zeros(3), np.zeros(2))
    with pytest.raises(LossInputError, match="finite"):
        paired_contrast(np.array([np.nan]), np.array([0.0]))


@settings(max_examples=50, deadline=None)
@given(data=predictions())
def test_target_probabilities_pick_the_target_column(data: tuple) -> None:
    probs, targets = data
    picked = target_probabilities(probs, targets)
    e, t = np.indices(targets.shape)
    np.testing.assert_array_equal(picked, probs[e, t, targets])
    assume(picked.min() >= 1e-300)
    np.testing.assert_allclose(clipped_log_loss(probs, targets, 1e-300), -np.log(picked))
