"""B3: exact ideal predictors for three information sets, and exact expected losses.

An ideal predictor outputs ``P(y_t | information)`` under the true law:

* ``CURRENT``: the current observation ``o_t`` only (B0's information);
* ``WINDOW``: ``o_{t-w+1} .. o_t`` (B1's; positions before the episode start are
  "no history", so early windows are shorter);
* ``HISTORY``: ``o_0 .. o_t``, the forward filter (B2's).

Predictions for observation arrays come from a forward filter over the law's
transition matrix (exact for any law of the family). Expected losses come from
closed forms that use the lag since the last visible observation; the tests check
each against the other and against brute-force enumeration.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from .laws import ErasedTarget, HiddenMarkovLaw


class IdealPredictorError(ValueError):
    """Bad input to an ideal predictor or to an exact expected-loss computation."""


class InformationSet(str, enum.Enum):
    """What a predictor may see at timepoint ``t``."""

    CURRENT = "current"
    WINDOW = "window"
    HISTORY = "history"


def _check_observations(law: HiddenMarkovLaw, observations: np.ndarray) -> np.ndarray:
    obs = np.asarray(observations)
    if obs.ndim != 2 or obs.shape[0] < 1 or obs.shape[1] < 1:
        raise IdealPredictorError(
            f"observations has shape {obs.shape}; expected [episodes, T] with both >= 1"
        )
    if not np.issubdtype(obs.dtype, np.integer):
        raise IdealPredictorError(f"observations has dtype {obs.dtype}; expected integers (uint8)")
    if obs.min() < 0 or obs.max() > law.erasure_symbol:
        raise IdealPredictorError(
            f"observations hold symbols in [{obs.min()}, {obs.max()}]; law {law.name!r} "
            f"allows 0..{law.erasure_symbol} ({law.erasure_symbol} = erasure)"
        )
    return obs.astype(np.int64)


def _check_window(window: int) -> int:
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise IdealPredictorError(f"window={window!r} must be a positive integer (8 in the plan)")
    return int(window)


def _likelihood(law: HiddenMarkovLaw, obs: np.ndarray) -> np.ndarray:
    """``P(o | x)`` up to a factor constant in ``x``: one-hot if visible, ones if erased."""
    k = law.n_states
    visible = obs < k
    lik = np.zeros(obs.shape + (k,))
    lik[visible, obs[visible]] = 1.0
    lik[~visible] = 1.0
    return lik


def _normalise(weights: np.ndarray, law: HiddenMarkovLaw) -> np.ndarray:
    total = weights.sum(axis=-1, keepdims=True)
    if np.any(total <= 0.0):
        raise IdealPredictorError(
            f"observations have probability zero under law {law.name!r} "
            f"(stay_probability={law.stay_probability}); they cannot come from it"
        )
    return weights / total


def _target_distribution(
    law: HiddenMarkovLaw, posterior: np.ndarray, erased: np.ndarray
) -> np.ndarray:
    """``P(y_t | info) = sum_x P(x_t = x | info) P(y_t | x, o_t)``."""
    predictive = posterior @ law.target_matrix()
    if law.erased_target is ErasedTarget.UNIFORM:
        predictive[erased] = 1.0 / law.n_states
    return predictive


def ideal_current_predictions(law: HiddenMarkovLaw, observations: np.ndarray) -> np.ndarray:
    """Ideal ``P(y_t | o_t)``, float64 ``[episodes, T, K]``.

    Notes
    -----
    A visible ``o_t`` is the state; an erased one leaves the uniform marginal.
    """
    return ideal_window_predictions(law, observations, 1)


def ideal_window_predictions(
    law: HiddenMarkovLaw, observations: np.ndarray, window: int
) -> np.ndarray:
    """Ideal ``P(y_t | o_{max(0, t-w+1)} .. o_t)``, float64 ``[episodes, T, K]``.

    Notes
    -----
    For each ``t`` a forward filter starts at ``a = max(0, t - w + 1)`` from the
    marginal ``P(x_a)``, which is uniform for every ``a`` (uniform start, doubly
    stochastic ``P``): ``alpha_a ∝ u * L(o_a)``, ``alpha_j ∝ (alpha_{j-1} P) * L(o_j)``.
    All ``t`` are filtered together, ``w`` steps in all.
    """
    obs = _check_observations(law, observations)
    w = _check_window(window)
    n_t, k = obs.shape[1], law.n_states
    lik = _likelihood(law, obs)
    transition = law.transition_matrix()
    t = np.arange(n_t)
    start = np.maximum(0, t - w + 1)
    alpha = _normalise(lik[:, start, :] / k, law)
    for j in range(1, w):
        index = start + j
        active = index <= t
        if not active.any():
            break
        step = (alpha @ transition) * lik[:, np.minimum(index, n_t - 1), :]
        step[:, ~active, :] = alpha[:, ~active, :]
        alpha = _normalise(step, law)
    return _target_distribution(law, alpha, obs == law.erasure_symbol)


def ideal_history_predictions(law: HiddenMarkovLaw, observations: np.ndarray) -> np.ndarray:
    """Ideal ``P(y_t | o_0 .. o_t)`` by the forward filter, float64 ``[episodes, T, K]``.

    Notes
    -----
    ``alpha_0 ∝ u * L(o_0)``, ``alpha_t ∝ (alpha_{t-1} P) * L(o_t)`` with
    ``L(o)[x] = P(o | x)`` (a one-hot for a visible ``o``, constant for an erasure),
    then ``P(y_t | o_0..t) = alpha_t C`` (uniform on erased steps under
    ``ErasedTarget.UNIFORM``). Rabiner (1989), "A tutorial on hidden Markov
    models", eq. 19-20.
    """
    obs = _check_observations(law, observations)
    n_t, k = obs.shape[1], law.n_states
    lik = _likelihood(law, obs)
    transition = law.transition_matrix()
    alpha = np.empty(obs.shape + (k,))
    alpha[:, 0] = _normalise(lik[:, 0] / k, law)
    for t in range(1, n_t):
        alpha[:, t] = _normalise((alpha[:, t - 1] @ transition) * lik[:, t], law)
    return _target_distribution(law, alpha, obs == law.erasure_symbol)


def ideal_predictions(
    law: HiddenMarkovLaw,
    observations: np.ndarray,
    information_set: InformationSet,
    window: int | None = None,
) -> np.ndarray:
    """Dispatch to the ideal predictor for ``information_set`` (``window`` for WINDOW only)."""
    info = InformationSet(information_set)
    if info is InformationSet.WINDOW:
        if window is None:
            raise IdealPredictorError("information_set='window' needs window= (8 in the plan)")
        return ideal_window_predictions(law, observations, window)
    if window is not None:
        raise IdealPredictorError(f"window={window!r} is only meaningful for 'window'")
    if info is InformationSet.CURRENT:
        return ideal_current_predictions(law, observations)
    return ideal_history_predictions(law, observations)


# ---------------------------------------------------------------- exact expectations


@dataclass(frozen=True)
class ExpectedIdealLosses:
    """Exact expected clipped log loss of the three ideal predictors, per timepoint.

    Attributes
    ----------
    current, window, history : numpy.ndarray, float64 ``[T]``
        ``E[-log max(p_I(y_t), clip)]`` at ``t = 0 .. T-1`` of an episode from
        the uniform start.
    stationary_current, stationary_window, stationary_history : float
        The limits ``t -> infinity``.
    """

    current: np.ndarray
    window: np.ndarray
    history: np.ndarray
    stationary_current: float
    stationary_window: float
    stationary_history: float


@dataclass(frozen=True)
class IdealLossFigures:
    """The ideal opportunity and window gap of a law, as recorded in the plan.

    ``opportunity = current - history`` and ``window_gap = window - history``,
    each the per-timepoint mean over ``t = 0 .. T-1`` of an episode from the
    uniform start (the averaging that reproduces DESIGN's 0.039892 and 1.42e-5),
    and the same at stationarity.
    """

    law_name: str
    n_timepoints: int
    window_size: int
    clip: float
    current: float
    window: float
    history: float
    opportunity: float
    window_gap: float
    stationary_opportunity: float
    stationary_window_gap: float
    averaging: str = "per-timepoint mean over t = 0..T-1 of an episode from the uniform start"

    def to_record(self) -> dict:
        """Plain JSON types."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _cross_entropy(truth: np.ndarray, predicted: np.ndarray, clip: float) -> np.ndarray:
    """``-sum_y q_y log max(p_y, clip)`` over the last axis."""
    return -(truth * np.log(np.maximum(predicted, clip))).sum(axis=-1)


def _lag_terms(law: HiddenMarkovLaw, n_terms: int, window: int, clip: float):
    """Erased-step losses given the last visible observation ``k = 1..n_terms`` steps ago.

    Returns ``(history[k], window[k], current_loss_if_none)`` where the true target
    law is ``q_k = (e_v P^k) C`` with ``P^k = U + lam^k (I - U)``; the window
    predictor equals ``q_k`` for ``k <= w - 1`` and ``q_inf = u C`` otherwise.
    """
    k_states = law.n_states
    lags = np.arange(1, n_terms + 1)
    decay = law.eigenvalue ** lags.astype(float)
    posterior = np.tile((1.0 - decay)[:, None] / k_states, (1, k_states))
    posterior[:, 0] += decay
    truth = posterior @ law.target_matrix()
    uninformed = np.full((1, k_states), 1.0 / k_states) @ law.target_matrix()
    history = _cross_entropy(truth, truth, clip)
    window_loss = np.where(lags <= window - 1, history, _cross_entropy(truth, uninformed, clip))
    current = _cross_entropy(truth, uninformed, clip)
    none = float(_cross_entropy(uninformed, uninformed, clip)[0])
    return history, window_loss, current, none


def _stationary_terms(law: HiddenMarkovLaw, max_terms: int) -> int:
    """Terms after which ``e^N`` or ``|lam|^N`` is below 1e-18 (the tail is then exact)."""
    limits = []
    e, lam = law.erasure_probability, abs(law.eigenvalue)
    for rate in (e, lam):
        if rate < 1.0:
            limits.append(1 if rate == 0.0 else math.ceil(math.log(1e-18) / math.log(rate)))
    if e == 1.0:
        limits.append(1)  # no visible observation ever: every term has weight 0
    if not limits or min(limits) > max_terms:
        raise IdealPredictorError(
            f"law {law.name!r} (e={law.erasure_probability}, lam={law.eigenvalue}) needs more "
            f"than {max_terms} terms for its stationary value; raise max_terms"
        )
    return max(1, min(limits))


def expected_ideal_losses(
    law: HiddenMarkovLaw,
    n_timepoints: int,
    window: int,
    clip: float,
    max_terms: int = 1_000_000,
) -> ExpectedIdealLosses:
    """Exact expected clipped log loss of the three ideal predictors.

    Parameters
    ----------
    law : HiddenMarkovLaw
    n_timepoints : int
        ``T`` (129 in the plan).
    window : int
        ``w`` (8 in the plan).
    clip : float in (0, 1)
        Probability clip (1e-8 in the plan).
    max_terms : int
        Largest lag summed for the stationary values.

    Notes
    -----
    On a visible step every predictor knows the state ``v`` and the loss is
    ``H_c = CE(C[v], C[v])``. On an erased step (``ErasedTarget.UNIFORM``: loss
    ``-log max(1/K, clip)`` for all three) the last visible observation is ``k``
    steps back with probability ``(1 - e) e^(k-1)``, ``k = 1..t``, and there is
    none with probability ``e^t``. Hence, with ``L_k`` the cross-entropy of the
    predictor against ``q_k`` and ``L_none`` that of ``u C`` against itself,

    ``E[loss_t] = (1 - e) H_c + e (sum_{k=1}^{t} (1 - e) e^(k-1) L_k + e^t L_none)``.

    The stationary value replaces the finite sum by the series, summed to ``N``
    terms with ``e^N < 1e-18`` or ``|lam|^N < 1e-18`` and the tail ``e^N L_none``.
    """
    for label, value in (("n_timepoints", n_timepoints),):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise IdealPredictorError(f"{label}={value!r} must be a positive integer")
    w = _check_window(window)
    if not (isinstance(clip, (int, float)) and 0.0 < clip < 1.0):
        raise IdealPredictorError(f"clip={clip!r} must be in (0, 1) (1e-8 in the plan)")
    n_t, e = int(n_timepoints), law.erasure_probability
    k_states = law.n_states
    visible_loss = float(_cross_entropy(law.target_matrix()[0], law.target_matrix()[0], clip))
    n_terms = max(n_t - 1, _stationary_terms(law, max_terms))
    history_k, window_k, current_k, none = _lag_terms(law, n_terms, w, clip)
    weights = (1.0 - e) * e ** np.arange(n_terms, dtype=float)

    def per_timepoint(lag_losses: np.ndarray) -> np.ndarray:
        partial = np.concatenate([[0.0], np.cumsum(weights[: n_t - 1] * lag_losses[: n_t - 1])])
        erased = partial + e ** np.arange(n_t, dtype=float) * none
        return (1.0 - e) * visible_loss + e * erased

    def stationary(lag_losses: np.ndarray) -> float:
        n = _stationary_terms(law, max_terms)
        erased = float(np.sum(weights[:n] * lag_losses[:n]) + e**n * none)
        return (1.0 - e) * visible_loss + e * erased

    if law.erased_target is ErasedTarget.UNIFORM:
        uniform_loss = -math.log(max(1.0 / k_states, clip))
        flat = np.full(n_t, (1.0 - e) * visible_loss + e * uniform_loss)
        value = float(flat[0])
        return ExpectedIdealLosses(flat, flat.copy(), flat.copy(), value, value, value)
    return ExpectedIdealLosses(
        current=per_timepoint(current_k),
        window=per_timepoint(window_k),
        history=per_timepoint(history_k),
        stationary_current=stationary(current_k),
        stationary_window=stationary(window_k),
        stationary_history=stationary(history_k),
    )


def ideal_loss_figures(
    law: HiddenMarkovLaw, n_timepoints: int, window: int, clip: float
) -> IdealLossFigures:
    """Exact current-to-history opportunity and window gap of ``law``.

    Notes
    -----
    Means over ``t = 0..T-1`` of :func:`expected_ideal_losses`. For the reference
    laws, ``T = 129``, ``w = 8``, ``clip = 1e-8``: E1 opportunity 0.0398924 nats
    (stationary 0.0403564) and window gap 1.4192e-5 (stationary 1.5190e-5); E0
    (``lam = 0``) and E2 (uniform erased targets) give exactly 0.
    """
    losses = expected_ideal_losses(law, n_timepoints, window, clip)
    current = float(losses.current.mean())
    window_loss = float(losses.window.mean())
    history = float(losses.history.mean())
    return IdealLossFigures(
        law_name=law.name,
        n_timepoints=int(n_timepoints),
        window_size=int(window),
        clip=float(clip),
        current=current,
        window=window_loss,
        history=history,
        opportunity=float(np.mean(losses.current - losses.history)),
        window_gap=float(np.mean(losses.window - losses.history)),
        stationary_opportunity=losses.stationary_current - losses.stationary_history,
        stationary_window_gap=losses.stationary_window - losses.stationary_history,
    )
