"""RP002A generator laws: a hidden Markov chain seen through erasures.

A law is a frozen :class:`HiddenMarkovLaw`. Laws are built from plan fields with
:meth:`LawRegistry.law_from_spec`, which looks the spec's ``family`` up: the project's own
families (:data:`BUILT_IN_FAMILIES`, tracked code, never read from package metadata), then
those registered on the registry in-process (tests), then a family an installed package
declares under the entry-point group ``prereg.law_families`` (name: the ``family`` a plan's
law spec gives; value: ``build(spec) -> HiddenMarkovLaw``; :mod:`prereg.kinds.registry` says which
installed packages qualify). ``examples/prereg-law-family`` is such a package. A law
records the family that built it (``HiddenMarkovLaw.family``) and a stored dataset records
:func:`law_to_spec` of it, which is read back through that family: a family whose laws
name it must also accept that spec.

The reference laws E0, E1 and E2 (DESIGN.md) are stated in one place, the plan
(``parameters.worlds`` of ``plans/STATISTICAL_PIPELINE_PLAN.json``): this module ships
the family that builds them, not their numbers.

Shared data conventions (relied on by models, training and analysis):
``observations`` and ``targets`` are ``uint8`` arrays of shape ``[episodes, T]``;
observation symbols ``0 .. K-1`` are the exact state and ``K`` is the erasure
symbol; targets take values ``0 .. K-1``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prereg.api import registry as extensions

#: The one family shipped with the project (see :func:`hidden_markov_erasure_law`).
HIDDEN_MARKOV_ERASURE = "hidden-markov-erasure"


class LawError(ValueError):
    """A law's parameters, spec or registry lookup are invalid."""


class ErasedTarget(str, enum.Enum):
    """How the target is drawn on a step whose observation is erased.

    ``CORRUPTED``: like every other step, the state with probability ``1 - c``,
    else a uniformly chosen other state (E0, E1).
    ``UNIFORM``: uniform noise over the ``K`` states, independent of the state (E2).
    """

    CORRUPTED = "corrupted"
    UNIFORM = "uniform"


@dataclass(frozen=True)
class HiddenMarkovLaw:
    """A hidden-Markov generator law with exact observations and erasures.

    Parameters
    ----------
    name : str
        The world's name, e.g. ``"E1"``.
    n_states : int
        ``K >= 2`` hidden states (at most 255, so that symbols fit ``uint8``).
    stay_probability : float in [0, 1]
        ``s``: probability of keeping the state at each step; otherwise the next
        state is chosen uniformly among the ``K - 1`` other states.
    erasure_probability : float in [0, 1]
        ``e``: probability that a step's observation is the erasure symbol ``K``;
        otherwise it is the exact state.
    target_corruption : float in [0, 1]
        ``c``: probability that the target is a uniformly chosen other state
        instead of the state.
    erased_target : ErasedTarget
        Target law on erased steps (``UNIFORM`` for E2).

    Notes
    -----
    The start state is uniform. The transition matrix is
    ``P = s I + (1 - s)/(K - 1) (J - I) = U + lam (I - U)`` with ``U = J/K`` and
    ``lam = (K s - 1)/(K - 1)``, so ``P^k = U + lam^k (I - U)``; ``P`` is doubly
    stochastic and every marginal state distribution is uniform.
    """

    name: str
    n_states: int
    stay_probability: float
    erasure_probability: float
    target_corruption: float
    erased_target: ErasedTarget = ErasedTarget.CORRUPTED
    family: str = field(default=HIDDEN_MARKOV_ERASURE)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise LawError(f"name={self.name!r} must be a non-empty string")
        if isinstance(self.n_states, bool) or not isinstance(self.n_states, (int, np.integer)):
            raise LawError(f"n_states={self.n_states!r} must be an integer (K, e.g. 4)")
        if not 2 <= int(self.n_states) <= 255:
            raise LawError(
                f"n_states={self.n_states!r} must be in [2, 255] so states and the "
                "erasure symbol fit uint8"
            )
        object.__setattr__(self, "n_states", int(self.n_states))
        for label in ("stay_probability", "erasure_probability", "target_corruption"):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
                raise LawError(f"{label}={value!r} must be a real number in [0, 1]")
            if not (math.isfinite(float(value)) and 0.0 <= float(value) <= 1.0):
                raise LawError(f"{label}={value!r} must be a probability in [0, 1]")
            object.__setattr__(self, label, float(value))
        try:
            object.__setattr__(self, "erased_target", ErasedTarget(self.erased_target))
        except ValueError:
            raise LawError(
                f"erased_target={self.erased_target!r} must be one of "
                f"{[m.value for m in ErasedTarget]}"
            ) from None

    @property
    def erasure_symbol(self) -> int:
        """The observation symbol meaning "erased": ``K``."""
        return self.n_states

    @property
    def n_symbols(self) -> int:
        """Size of the observation alphabet: ``K + 1``."""
        return self.n_states + 1

    @property
    def eigenvalue(self) -> float:
        """``lam = (K s - 1)/(K - 1)``, so that ``P^k = U + lam^k (I - U)``."""
        k = self.n_states
        return (k * self.stay_probability - 1.0) / (k - 1)

    def transition_matrix(self) -> np.ndarray:
        """``P[i, j] = P(x_{t+1} = j | x_t = i)``, float64 ``[K, K]``."""
        k = self.n_states
        other = (1.0 - self.stay_probability) / (k - 1)
        matrix = np.full((k, k), other)
        np.fill_diagonal(matrix, self.stay_probability)
        return matrix

    def target_matrix(self) -> np.ndarray:
        """``C[x, y] = P(y_t = y | x_t = x)`` on a corrupted-law step, float64 ``[K, K]``."""
        k = self.n_states
        matrix = np.full((k, k), self.target_corruption / (k - 1))
        np.fill_diagonal(matrix, 1.0 - self.target_corruption)
        return matrix


def law_to_spec(law: HiddenMarkovLaw) -> dict[str, Any]:
    """The plain-JSON spec that :func:`law_from_spec` turns back into ``law``."""
    return {
        "family": law.family,
        "name": law.name,
        "n_states": law.n_states,
        "stay_probability": law.stay_probability,
        "erasure_probability": law.erasure_probability,
        "target_corruption": law.target_corruption,
        "erased_target": law.erased_target.value,
    }


def hidden_markov_erasure_law(spec: Mapping[str, Any]) -> HiddenMarkovLaw:
    """Family ``"hidden-markov-erasure"``: build a law from its plan fields.

    Required keys: ``name``, ``n_states``, ``stay_probability``,
    ``erasure_probability``, ``target_corruption``; optional ``erased_target``
    (``"corrupted"`` default, or ``"uniform"``) and ``family``. Unknown keys are
    refused so that a misspelt plan field cannot be silently ignored.
    """
    required = ("name", "n_states", "stay_probability", "erasure_probability", "target_corruption")
    allowed = set(required) | {"erased_target", "family"}
    missing = [key for key in required if key not in spec]
    if missing:
        raise LawError(f"law spec {dict(spec)!r} lacks field(s) {missing}; add them to the plan")
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise LawError(
            f"law spec for {spec.get('name')!r} has unknown field(s) {unknown}; "
            f"allowed: {sorted(allowed)}"
        )
    family = spec.get("family", HIDDEN_MARKOV_ERASURE)
    if family != HIDDEN_MARKOV_ERASURE:
        raise LawError(f"family={family!r} is not {HIDDEN_MARKOV_ERASURE!r}")
    return HiddenMarkovLaw(
        name=spec["name"],
        n_states=spec["n_states"],
        stay_probability=spec["stay_probability"],
        erasure_probability=spec["erasure_probability"],
        target_corruption=spec["target_corruption"],
        erased_target=spec.get("erased_target", ErasedTarget.CORRUPTED.value),
    )


LawFamily = Callable[[Mapping[str, Any]], HiddenMarkovLaw]

#: The project's own families: name -> builder (tracked code, the one home of that mapping).
#: A name here is never resolved through package metadata.
BUILT_IN_FAMILIES: dict[str, LawFamily] = {HIDDEN_MARKOV_ERASURE: hidden_markov_erasure_law}

#: Law families by name: the built-in ones, then those installed packages declare under
#: ``prereg.law_families``.
FAMILY_POINT = extensions.ExtensionPoint(
    extensions.LAW_FAMILIES, BUILT_IN_FAMILIES, lambda name, build: callable(build), "law family"
)


def installed_family(name: str) -> LawFamily:
    """The builder an installed package declares for family ``name`` (loaded once per process).

    Raises :class:`prereg.kinds.registry.NotInstalled` with the reasons no installed package
    qualifies (e.g. its module was edited after install: reinstall it).
    """
    if name in BUILT_IN_FAMILIES:
        raise LawError(f"law family {name!r} is built in; it is never read from package metadata")
    return FAMILY_POINT.load(name)


def family_origin(name: str) -> dict | None:
    """Where family ``name`` came from: built in, or the installed distribution and file
    (:func:`prereg.kinds.registry.origin`); None if it was not loaded from either."""
    return FAMILY_POINT.origin(name)


class LawRegistry:
    """Law families (name -> function of a spec) and named laws (name -> law).

    Use :func:`law_registry` for a registry that holds the built-in families; the plan's
    worlds are built with it. A family this registry does not hold is looked up among
    installed packages (entry-point group ``prereg.law_families``), unless it is a
    built-in name.
    """

    def __init__(self) -> None:
        self._families: dict[str, LawFamily] = {}
        self._laws: dict[str, HiddenMarkovLaw] = {}

    def register_family(self, name: str, build: LawFamily) -> None:
        """Register ``build(spec) -> law`` under ``name`` in this registry (in-process; a run
        resolves a plan's families through :func:`law_registry`, so a family meant for runs
        is declared by an installed package instead). Refuses to replace one, and a built-in
        name for another builder."""
        if name in self._families:
            raise LawError(f"law family {name!r} is already registered; choose another name")
        if name in BUILT_IN_FAMILIES and build is not BUILT_IN_FAMILIES[name]:
            raise LawError(f"law family {name!r} is built in; register yours under another name")
        self._families[name] = build

    def register_law(self, law: HiddenMarkovLaw) -> None:
        """Register ``law`` under ``law.name``; refuses to replace a different law."""
        if not isinstance(law, HiddenMarkovLaw):
            raise TypeError(f"law={law!r} must be a HiddenMarkovLaw")
        known = self._laws.get(law.name)
        if known is not None and known != law:
            raise LawError(
                f"a different law is already registered as {law.name!r}: {known!r}; "
                "register yours under a new name"
            )
        self._laws[law.name] = law

    def get_law(self, name: str) -> HiddenMarkovLaw:
        """The law registered as ``name``."""
        try:
            return self._laws[name]
        except KeyError:
            raise LawError(
                f"unknown law {name!r}; known laws: {sorted(self._laws)}. "
                "Register it with register_law or give its full spec."
            ) from None

    def family(self, name: object) -> LawFamily:
        """The builder of family ``name``: this registry's, else an installed package's."""
        if isinstance(name, str) and name in self._families:
            return self._families[name]
        reasons: list[str] = []
        if isinstance(name, str) and name not in BUILT_IN_FAMILIES:
            try:
                return installed_family(name)
            except extensions.NotInstalled as missing:
                reasons = missing.reasons
        why = f" ({'; '.join(reasons)})" if reasons else ""
        known = sorted(set(self._families) | set(FAMILY_POINT.names()) - set(BUILT_IN_FAMILIES))
        raise LawError(
            f"law spec family={name!r} is unknown{why}; known families: {known} (built in: "
            f"{sorted(BUILT_IN_FAMILIES)}). A package adds one by declaring it under "
            f'[project.entry-points."{extensions.LAW_FAMILIES}"] in its pyproject.toml '
            '(<family> = "<module>:<build>", build(spec) -> HiddenMarkovLaw) and being '
            "installed into this environment (pip install PATH; not -e)"
        )

    def law_from_spec(self, spec: Mapping[str, Any]) -> HiddenMarkovLaw:
        """Build a law from a plan spec through the family named in ``spec["family"]``."""
        if not isinstance(spec, Mapping):
            raise TypeError(f"spec={spec!r} must be a mapping of plan fields")
        family = spec.get("family")
        law = self.family(family)(spec)
        if not isinstance(law, HiddenMarkovLaw):
            where = family_origin(family) or {}
            raise LawError(
                f"law family {family!r} ({where.get('distribution', 'registered')}) built "
                f"{law!r} from {dict(spec)!r}, not a HiddenMarkovLaw"
            )
        return law

    @property
    def law_names(self) -> tuple[str, ...]:
        """Registered law names, sorted."""
        return tuple(sorted(self._laws))


def law_registry() -> LawRegistry:
    """A fresh registry holding the built-in families; installed families resolve through it."""
    registry = LawRegistry()
    for name, build in BUILT_IN_FAMILIES.items():
        registry.register_family(name, build)
    return registry


def generate_episodes(
    law: HiddenMarkovLaw, episodes: int, n_timepoints: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``episodes`` independent episodes of ``n_timepoints`` steps.

    Parameters
    ----------
    law : HiddenMarkovLaw
    episodes : int >= 1
    n_timepoints : int >= 1
        ``T`` (129 in the plan).
    rng : numpy.random.Generator
        The only source of randomness; same generator state -> identical arrays.

    Returns
    -------
    observations, targets : numpy.ndarray of uint8, shape ``[episodes, T]``
        Observation ``K`` is an erasure; targets are in ``0 .. K-1``.

    Notes
    -----
    Draw order (every law makes the same seven draws, row-major ``[E, T]``):

    1. ``x0 = rng.integers(0, K, size=E)``, the uniform start state;
    2. ``u_move = rng.random((E, T-1))``; step ``t`` keeps the state iff ``u_move < s``;
    3. ``jump = rng.integers(1, K, size=(E, T-1))``; a move adds ``jump`` mod ``K``
       (a uniform *other* state), so ``x_t = (x0 + cumsum(moves)) mod K``;
    4. ``u_erase = rng.random((E, T))``; the step is erased iff ``u_erase < e``;
    5. ``u_corrupt = rng.random((E, T))``; the target is corrupted iff ``u_corrupt < c``;
    6. ``shift = rng.integers(1, K, size=(E, T))``; a corrupted target is
       ``(x + shift) mod K``, a uniform other state;
    7. ``noise = rng.integers(0, K, size=(E, T))``; under ``ErasedTarget.UNIFORM`` the
       target on an erased step is ``noise`` (drawn, unused, for other laws).

    All integer draws use ``dtype=int64``.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng={rng!r} must be a numpy.random.Generator (see prereg.base.seeds)")
    for label, value in (("episodes", episodes), ("n_timepoints", n_timepoints)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise LawError(f"{label}={value!r} must be a positive integer")
    k, n_ep, n_t = law.n_states, int(episodes), int(n_timepoints)
    start = rng.integers(0, k, size=n_ep, dtype=np.int64)
    moves = rng.random((n_ep, n_t - 1)) >= law.stay_probability
    jump = rng.integers(1, k, size=(n_ep, n_t - 1), dtype=np.int64)
    erased = rng.random((n_ep, n_t)) < law.erasure_probability
    corrupted = rng.random((n_ep, n_t)) < law.target_corruption
    shift = rng.integers(1, k, size=(n_ep, n_t), dtype=np.int64)
    noise = rng.integers(0, k, size=(n_ep, n_t), dtype=np.int64)

    increments = np.concatenate([start[:, None], np.where(moves, jump, 0)], axis=1)
    states = np.cumsum(increments, axis=1) % k
    observations = np.where(erased, k, states)
    targets = np.where(corrupted, (states + shift) % k, states)
    if law.erased_target is ErasedTarget.UNIFORM:
        targets = np.where(erased, noise, targets)
    return observations.astype(np.uint8), targets.astype(np.uint8)
