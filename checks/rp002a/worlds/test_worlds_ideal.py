import pytest
from planlaws import reference_law_registry

pytestmark = pytest.mark.software

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.base.seeds import numpy_generator
from prereg.rp002a.ideal import (
    IdealPredictorError,
    InformationSet,
    expected_ideal_losses,
    ideal_current_predictions,
    ideal_history_predictions,
    ideal_loss_figures,
    ideal_predictions,
    ideal_window_predictions,
)
from prereg.rp002a.laws import (
    ErasedTarget,
    HiddenMarkovLaw,
    generate_episodes,
)

CLIP, T, WINDOW = 1e-8, 129, 8
REGISTRY = reference_law_registry()


def laws(max_states: int = 3) -> st.SearchStrategy:
    # Interior probabilities keep every observation sequence possible, so that the
    # brute-force reference below is defined for all of them.
    probability = st.floats(0.02, 0.98)
    return st.builds(
        HiddenMarkovLaw,
        name=st.just("L"),
        n_states=st.integers(2, max_states),
        stay_probability=probability,
        erasure_probability=probability,
        target_corruption=st.floats(0.0, 1.0),
        erased_target=st.sampled_from(list(ErasedTarget)),
    )


def enumerate_joint(law: HiddenMarkovLaw, n_t: int):
    """All state sequences with their prior probabilities (brute force)."""
    k = law.n_states
    states = np.array(list(itertools.product(range(k), repeat=n_t)), dtype=np.int64)
    transition = law.transition_matrix()
    prior = np.full(len(states), 1.0 / k)
    for t in range(1, n_t):
        prior = prior * transition[states[:, t - 1], states[:, t]]
    return states, prior


def observation_likelihood(law: HiddenMarkovLaw, states: np.ndarray, symbols: np.ndarray):
    """P(o_j | x_j) for every state sequence: [sequences, len(symbols)]."""
    e, k = law.erasure_probability, law.n_states
    erased = symbols == k
    return np.where(erased[None, :], e, (1 - e) * (states == symbols[None, :]))


def target_given_state(law: HiddenMarkovLaw, states_t: np.ndarray, erased: bool) -> np.ndarray:
    """P(y | x_t, o_t) rows for each sequence: [sequences, K]."""
    k = law.n_states
    if erased and law.erased_target is ErasedTarget.UNIFORM:
        return np.full((len(states_t), k), 1.0 / k)
    return law.target_matrix()[states_t]


def brute_force(law: HiddenMarkovLaw, obs_row: np.ndarray, window: int) -> np.ndarray:
    """P(y_t | o_{max(0,t-w+1)}..o_t) by summing over all state sequences."""
    n_t = len(obs_row)
    states, prior = enumerate_joint(law, n_t)
    out = np.zeros((n_t, law.n_states))
    for t in range(n_t):
        lo = max(0, t - window + 1)
        lik = observation_likelihood(law, states[:, lo : t + 1], obs_row[lo : t + 1]).prod(axis=1)
        weight = prior * lik
        rows = target_given_state(law, states[:, t], bool(obs_row[t] == law.n_states))
        out[t] = weight @ rows / weight.sum()
    return out


@settings(max_examples=60, deadline=None)
@given(law=laws(), n_t=st.integers(1, 6), window=st.integers(1, 7), seed=st.integers(0, 2**32))
def test_filters_equal_brute_force_enumeration(
    law: HiddenMarkovLaw, n_t: int, window: int, seed: int
) -> None:
    obs, _ = generate_episodes(law, 3, n_t, np.random.default_rng(seed))
    history = ideal_history_predictions(law, obs)
    windowed = ideal_window_predictions(law, obs, window)
    current = ideal_current_predictions(law, obs)
    for e in range(obs.shape[0]):
        np.testing.assert_allclose(history[e], brute_force(law, obs[e], n_t), atol=1e-12)
        np.testing.assert_allclose(windowed[e], brute_force(law, obs[e], window), atol=1e-12)
        np.testing.assert_allclose(current[e], brute_force(law, obs[e], 1), atol=1e-12)


def test_window_covering_the_episode_equals_the_full_history() -> None:
    law = REGISTRY.get_law("E1")
    obs, _ = generate_episodes(law, 20, 12, numpy_generator("test-worlds", "cover"))
    np.testing.assert_allclose(
        ideal_window_predictions(law, obs, 12), ideal_history_predictions(law, obs), atol=1e-15
    )


def test_dispatch_and_errors() -> None:
    law = REGISTRY.get_law("E1")
    obs, _ = generate_episodes(law, 2, 10, np.random.default_rng(1))
    np.testing.assert_array_equal(
        ideal_predictions(law, obs, "window", window=3), ideal_window_predictions(law, obs, 3)
    )
    np.testing.assert_array_equal(
        ideal_predictions(law, obs, InformationSet.HISTORY), ideal_history_predictions(law, obs)
    )
    with pytest.raises(IdealPredictorError, match="needs window"):
        ideal_predictions(law, obs, "window")
    with pytest.raises(IdealPredictorError, match="window=3"):
        ideal_predictions(law, obs, "current", window=3)
    with pytest.raises(IdealPredictorError, match=r"symbols in \[0, 5\]"):
        ideal_history_predictions(law, np.array([[0, 5]], dtype=np.uint8))
    with pytest.raises(IdealPredictorError, match="window=0"):
        ideal_window_predictions(law, obs, 0)
    with pytest.raises(IdealPredictorError, match="shape"):
        ideal_history_predictions(law, obs[0])
    sticky = HiddenMarkovLaw("sticky", 4, 1.0, 0.5, 0.1)
    with pytest.raises(IdealPredictorError, match="probability zero"):
        ideal_history_predictions(sticky, np.array([[0, 1]], dtype=np.uint8))


# ------------------------------------------------------------------ exact figures


def test_reference_figures_reproduce_design() -> None:
    # DESIGN.md: "the exact ideal E1 current-to-history opportunity is 0.039892
    # nats ... and the ideal window-eight gap is 1.42e-5"; E0, E2 exactly 0.
    e1 = ideal_loss_figures(REGISTRY.get_law("E1"), T, WINDOW, CLIP)
    assert round(e1.opportunity, 6) == 0.039892
    assert round(e1.window_gap, 7) == 1.42e-5
    assert e1.opportunity == pytest.approx(e1.current - e1.history, abs=1e-15)
    # Stationary values (t -> infinity) differ: DESIGN's numbers are the T = 129
    # per-timepoint average from the uniform start, not these.
    assert round(e1.stationary_opportunity, 6) == 0.040356
    assert round(e1.stationary_window_gap, 8) == 1.519e-5
    for name in ("E0", "E2"):
        figures = ideal_loss_figures(REGISTRY.get_law(name), T, WINDOW, CLIP)
        assert abs(figures.opportunity) < 1e-15 and abs(figures.window_gap) < 1e-15
        assert abs(figures.stationary_opportunity) < 1e-15
    record = e1.to_record()
    assert record["law_name"] == "E1" and "uniform start" in record["averaging"]


def test_e1_opportunity_by_hand() -> None:
    # Hand derivation (independent of the module's cross-entropy code): an erased
    # step whose last visible state is k back has target law q_k with top mass
    # q = p(1-c) + (1-p)c/3, p = 1/4 + 3/4 lam^k, lam = 0.8; the current-obs ideal
    # is uniform, so the gap is log 4 - H(q_k).
    s, e, c, k_states = 0.85, 0.5, 0.48, 4
    lam = (k_states * s - 1) / (k_states - 1)

    def gap(k: int) -> float:
        p = 1 / k_states + (1 - 1 / k_states) * lam**k
        q = p * (1 - c) + (1 - p) * c / (k_states - 1)
        return math.log(k_states) + q * math.log(q) + (1 - q) * math.log((1 - q) / 3)

    per_t = [e * sum((1 - e) * e ** (k - 1) * gap(k) for k in range(1, t + 1)) for t in range(T)]
    window_t = [
        e * sum((1 - e) * e ** (k - 1) * gap(k) for k in range(WINDOW, t + 1)) for t in range(T)
    ]
    figures = ideal_loss_figures(REGISTRY.get_law("E1"), T, WINDOW, CLIP)
    assert figures.opportunity == pytest.approx(sum(per_t) / T, abs=1e-13)
    assert figures.window_gap == pytest.approx(sum(window_t) / T, abs=1e-15)


def enumerate_observations(law: HiddenMarkovLaw, n_t: int):
    """Every observation sequence with its probability (brute force)."""
    states, prior = enumerate_joint(law, n_t)
    symbols = np.array(list(itertools.product(range(law.n_symbols), repeat=n_t)), dtype=np.int64)
    probs = np.array(
        [(prior * observation_likelihood(law, states, row).prod(axis=1)).sum() for row in symbols]
    )
    return symbols, probs


@settings(max_examples=25, deadline=None)
@given(law=laws(max_states=3), n_t=st.integers(1, 4), window=st.integers(1, 4))
def test_expected_losses_equal_exact_enumeration(
    law: HiddenMarkovLaw, n_t: int, window: int
) -> None:
    # E[loss_t] = sum over all observation sequences of P(o) times the
    # cross-entropy of the history filter (the true conditional target law) against
    # each predictor: an exact reference that shares no code with the closed form.
    symbols, probs = enumerate_observations(law, n_t)
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    truth = ideal_history_predictions(law, symbols)
    exact = expected_ideal_losses(law, n_t, window, CLIP)
    for info, got in (
        (ideal_current_predictions(law, symbols), exact.current),
        (ideal_window_predictions(law, symbols, window), exact.window),
        (truth, exact.history),
    ):
        cross = -(truth * np.log(np.maximum(info, CLIP))).sum(axis=-1)
        np.testing.assert_allclose(probs @ cross, got, atol=1e-12)


def test_stationary_values_are_the_long_episode_limit() -> None:
    law = REGISTRY.get_law("E1")
    exact = expected_ideal_losses(law, 400, WINDOW, CLIP)
    assert exact.history[-1] == pytest.approx(exact.stationary_history, abs=1e-14)
    assert exact.current[-1] == pytest.approx(exact.stationary_current, abs=1e-14)
    assert exact.window[-1] == pytest.approx(exact.stationary_window, abs=1e-14)


@pytest.mark.parametrize("e", [0.0, 1.0])
def test_edge_erasure_rates(e: float) -> None:
    law = HiddenMarkovLaw("edge", 4, 0.85, e, 0.48)
    figures = ideal_loss_figures(law, T, WINDOW, CLIP)
    assert figures.opportunity == 0.0 and figures.window_gap == 0.0
    assert figures.current == pytest.approx(
        -math.log(0.52) * 0.52 - 0.48 * math.log(0.16) if e == 0 else math.log(4), abs=1e-12
    )


def test_exact_figure_argument_errors() -> None:
    law = REGISTRY.get_law("E1")
    with pytest.raises(IdealPredictorError, match="clip=0"):
        expected_ideal_losses(law, T, WINDOW, 0)
    with pytest.raises(IdealPredictorError, match="n_timepoints=0"):
        expected_ideal_losses(law, 0, WINDOW, CLIP)
    slow = HiddenMarkovLaw("slow", 4, 1.0, 0.999999, 0.48)
    with pytest.raises(IdealPredictorError, match="max_terms"):
        expected_ideal_losses(slow, T, WINDOW, CLIP, max_terms=1000)


# ------------------------------------------------------------------ Monte Carlo


def sampled(name: str, episodes: int):
    law = REGISTRY.get_law(name)
    obs, tgt = generate_episodes(law, episodes, T, numpy_generator("test-worlds-mc", name))
    return law, obs, tgt


def target_loss(probabilities: np.ndarray, targets: np.ndarray) -> np.ndarray:
    p = np.take_along_axis(probabilities, targets[..., None].astype(np.int64), -1)[..., 0]
    return -np.log(np.maximum(p, CLIP))


def test_monte_carlo_agrees_with_exact_e1_figures() -> None:
    law, obs, tgt = sampled("E1", 3000)
    figures = ideal_loss_figures(law, T, WINDOW, CLIP)
    current = ideal_current_predictions(law, obs)
    history = ideal_history_predictions(law, obs)
    window = ideal_window_predictions(law, obs, WINDOW)
    # Sampled targets: episode-mean differences, tolerance 4 standard errors.
    diff = (target_loss(current, tgt) - target_loss(history, tgt)).mean(axis=1)
    se = diff.std(ddof=1) / math.sqrt(len(diff))
    assert abs(diff.mean() - figures.opportunity) < 4 * se
    assert se < 0.004  # the check is sharp enough to see a 10% error

    # Rao-Blackwellised (expected loss given the observations): far lower variance,
    # which is what makes the 1.4e-5 window gap visible at all.
    def expected_given_obs(pred: np.ndarray) -> np.ndarray:
        return (-(history * np.log(np.maximum(pred, CLIP))).sum(-1)).mean(axis=1)

    base = expected_given_obs(history)
    for pred, exact in ((current, figures.opportunity), (window, figures.window_gap)):
        gap = expected_given_obs(pred) - base
        se = gap.std(ddof=1) / math.sqrt(len(gap))
        assert abs(gap.mean() - exact) < 4 * se
        assert se < 0.2 * exact


@pytest.mark.parametrize("name", ["E0", "E2"])
def test_null_worlds_have_identical_ideal_predictions(name: str) -> None:
    law, obs, tgt = sampled(name, 200)
    current = ideal_current_predictions(law, obs)
    np.testing.assert_allclose(ideal_history_predictions(law, obs), current, atol=1e-15)
    np.testing.assert_allclose(ideal_window_predictions(law, obs, WINDOW), current, atol=1e-15)
    figures = ideal_loss_figures(law, T, WINDOW, CLIP)
    mc = target_loss(current, tgt).mean()
    se = target_loss(current, tgt).mean(axis=1).std(ddof=1) / math.sqrt(obs.shape[0])
    assert abs(mc - figures.current) < 4 * se
