import pytest
from planlaws import REFERENCE_LAW_SPECS, reference_law_registry

pytestmark = pytest.mark.software

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.base.seeds import numpy_generator
from prereg.rp002a.laws import (
    HIDDEN_MARKOV_ERASURE,
    ErasedTarget,
    HiddenMarkovLaw,
    LawError,
    LawRegistry,
    generate_episodes,
    hidden_markov_erasure_law,
    law_to_spec,
)

N_EPISODES, T = 2000, 129


def law_strategy(max_states: int = 5) -> st.SearchStrategy:
    probability = st.floats(0.0, 1.0)
    return st.builds(
        HiddenMarkovLaw,
        name=st.just("L"),
        n_states=st.integers(2, max_states),
        stay_probability=probability,
        erasure_probability=probability,
        target_corruption=probability,
        erased_target=st.sampled_from(list(ErasedTarget)),
    )


def within(observed: float, expected: float, n: int, z: float = 5.0) -> bool:
    """Binomial-proportion check at z standard errors."""
    return abs(observed - expected) <= z * math.sqrt(expected * (1 - expected) / n)


# ------------------------------------------------------------------ registry


def test_reference_registry_holds_the_design_laws() -> None:
    # DESIGN.md, "RP002A reference generator laws" table.
    registry = reference_law_registry()
    assert registry.law_names == ("E0", "E1", "E2")
    e0, e1, e2 = (registry.get_law(n) for n in ("E0", "E1", "E2"))
    assert (e0.stay_probability, e0.erasure_probability, e0.target_corruption) == (0.25, 0.5, 0.48)
    assert (e1.stay_probability, e1.erasure_probability, e1.target_corruption) == (0.85, 0.5, 0.48)
    assert e2.erased_target is ErasedTarget.UNIFORM and e1.erased_target is ErasedTarget.CORRUPTED
    assert e0.n_states == e1.n_states == e2.n_states == 4
    assert e1.erasure_symbol == 4 and e1.n_symbols == 5


def test_unknown_law_error_lists_known_names() -> None:
    with pytest.raises(LawError, match=r"unknown law 'E9'.*\['E0', 'E1', 'E2'\]"):
        reference_law_registry().get_law("E9")


def test_spec_round_trip_and_unknown_fields() -> None:
    registry = reference_law_registry()
    for name, spec in REFERENCE_LAW_SPECS.items():
        law = registry.law_from_spec(spec)
        assert law == registry.get_law(name)
        assert registry.law_from_spec(law_to_spec(law)) == law
    with pytest.raises(LawError, match="unknown field"):
        registry.law_from_spec({**REFERENCE_LAW_SPECS["E1"], "stay": 0.8})
    with pytest.raises(LawError, match="lacks field"):
        registry.law_from_spec({"family": HIDDEN_MARKOV_ERASURE, "name": "X"})
    with pytest.raises(LawError, match="known families"):
        registry.law_from_spec({**REFERENCE_LAW_SPECS["E1"], "family": "nope"})
    with pytest.raises(TypeError):
        registry.law_from_spec(["E1"])


def test_registering_a_user_law_and_refusing_a_conflict() -> None:
    registry = reference_law_registry()
    mine = HiddenMarkovLaw("E3", 3, 0.9, 0.3, 0.1)
    registry.register_law(mine)
    assert registry.get_law("E3") is mine
    registry.register_law(HiddenMarkovLaw("E3", 3, 0.9, 0.3, 0.1))  # equal: accepted
    with pytest.raises(LawError, match="already registered"):
        registry.register_law(HiddenMarkovLaw("E3", 3, 0.8, 0.3, 0.1))
    with pytest.raises(LawError, match="already registered"):
        registry.register_family(HIDDEN_MARKOV_ERASURE, hidden_markov_erasure_law)
    empty = LawRegistry()
    with pytest.raises(LawError, match=r"known laws: \[\]"):
        empty.get_law("E1")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("stay_probability", 1.5, "stay_probability=1.5"),
        ("erasure_probability", -0.1, "erasure_probability=-0.1"),
        ("target_corruption", float("nan"), "target_corruption=nan"),
        ("n_states", 1, "n_states=1"),
        ("n_states", 2.0, "n_states=2.0"),
        ("erased_target", "sometimes", "erased_target='sometimes'"),
        ("name", "", "name=''"),
    ],
)
def test_bad_law_parameters_are_named(field: str, value: object, message: str) -> None:
    spec = {**REFERENCE_LAW_SPECS["E1"], field: value}
    with pytest.raises(LawError, match=message.replace("(", r"\(")):
        hidden_markov_erasure_law(spec)


def test_transition_closed_form_matches_matrix_power() -> None:
    # P^k = U + lam^k (I - U), lam = (K s - 1)/(K - 1): the law's docstring.
    for spec in REFERENCE_LAW_SPECS.values():
        law = hidden_markov_erasure_law(spec)
        k = law.n_states
        u = np.full((k, k), 1 / k)
        for power in range(6):
            expected = u + law.eigenvalue**power * (np.eye(k) - u)
            got = np.linalg.matrix_power(law.transition_matrix(), power)
            np.testing.assert_allclose(got, expected, atol=1e-15)


# ------------------------------------------------------------------ generation


def reference_loop(law: HiddenMarkovLaw, episodes: int, n_t: int, rng: np.random.Generator):
    """Step-by-step rendering of the draw order documented in generate_episodes."""
    k = law.n_states
    start = rng.integers(0, k, size=episodes, dtype=np.int64)
    u_move = rng.random((episodes, n_t - 1))
    jump = rng.integers(1, k, size=(episodes, n_t - 1), dtype=np.int64)
    u_erase = rng.random((episodes, n_t))
    u_corrupt = rng.random((episodes, n_t))
    shift = rng.integers(1, k, size=(episodes, n_t), dtype=np.int64)
    noise = rng.integers(0, k, size=(episodes, n_t), dtype=np.int64)
    obs = np.zeros((episodes, n_t), dtype=np.uint8)
    tgt = np.zeros((episodes, n_t), dtype=np.uint8)
    for e in range(episodes):
        x = int(start[e])
        for t in range(n_t):
            if t > 0 and u_move[e, t - 1] >= law.stay_probability:
                x = (x + int(jump[e, t - 1])) % k
            erased = u_erase[e, t] < law.erasure_probability
            obs[e, t] = k if erased else x
            y = (x + int(shift[e, t])) % k if u_corrupt[e, t] < law.target_corruption else x
            if erased and law.erased_target is ErasedTarget.UNIFORM:
                y = int(noise[e, t])
            tgt[e, t] = y
    return obs, tgt


@settings(max_examples=40, deadline=None)
@given(
    law=law_strategy(),
    episodes=st.integers(1, 4),
    n_t=st.integers(1, 12),
    seed=st.integers(0, 2**32),
)
def test_vectorised_generation_follows_documented_draw_order(
    law: HiddenMarkovLaw, episodes: int, n_t: int, seed: int
) -> None:
    got = generate_episodes(law, episodes, n_t, np.random.default_rng(seed))
    want = reference_loop(law, episodes, n_t, np.random.default_rng(seed))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@settings(max_examples=40, deadline=None)
@given(law=law_strategy(), seed=st.integers(0, 2**32))
def test_generated_symbols_respect_the_law(law: HiddenMarkovLaw, seed: int) -> None:
    obs, tgt = generate_episodes(law, 6, 20, np.random.default_rng(seed))
    assert obs.dtype == tgt.dtype == np.uint8 and obs.shape == tgt.shape == (6, 20)
    assert obs.max() <= law.erasure_symbol and tgt.max() < law.n_states
    visible = obs < law.n_states
    if law.erasure_probability == 0.0:
        assert visible.all()
    if law.erasure_probability == 1.0:
        assert not visible.any()
    if law.target_corruption == 0.0:
        assert np.array_equal(tgt[visible], obs[visible])
    if law.target_corruption == 1.0:
        assert not np.any(tgt[visible] == obs[visible])
    if law.stay_probability == 1.0:
        for row in obs:
            assert len(set(row[row < law.n_states].tolist())) <= 1


def test_same_seed_same_bytes_and_different_seed_differs() -> None:
    law = reference_law_registry().get_law("E1")
    a = generate_episodes(law, 50, T, numpy_generator("test-worlds", "a"))
    b = generate_episodes(law, 50, T, numpy_generator("test-worlds", "a"))
    c = generate_episodes(law, 50, T, numpy_generator("test-worlds", "b"))
    assert a[0].tobytes() == b[0].tobytes() and a[1].tobytes() == b[1].tobytes()
    assert a[0].tobytes() != c[0].tobytes()


@pytest.mark.parametrize("name", ["E0", "E1", "E2"])
def test_law_statistics_at_a_fixed_seed(name: str) -> None:
    law = reference_law_registry().get_law(name)
    obs, tgt = generate_episodes(law, N_EPISODES, T, numpy_generator("test-worlds", name))
    k = law.n_states
    erased = obs == k
    # Erasure rate e.
    assert within(erased.mean(), law.erasure_probability, erased.size)
    # Stay frequency: between consecutive visible observations, P(same) = s.
    both = ~erased[:, 1:] & ~erased[:, :-1]
    same = (obs[:, 1:] == obs[:, :-1])[both]
    assert within(same.mean(), law.stay_probability, same.size)
    # Target corruption on visible steps: P(target != state) = c.
    corrupted = (tgt != obs)[~erased]
    assert within(corrupted.mean(), law.target_corruption, corrupted.size)
    # Erased step right after a visible one: P(target == previous state) is
    # s(1-c) + (1-s)c/(K-1) for E0/E1 and 1/K for E2 (uniform noise).
    after = erased[:, 1:] & ~erased[:, :-1]
    hit = (tgt[:, 1:] == obs[:, :-1])[after]
    s, c = law.stay_probability, law.target_corruption
    expected = 1 / k if name == "E2" else s * (1 - c) + (1 - s) * c / (k - 1)
    assert within(hit.mean(), expected, hit.size)
    if name == "E1":
        assert not within(hit.mean(), 1 / k, hit.size)  # the check can tell E1 from E2
    # Erased-step targets are uniform over the K states in every world.
    counts = np.bincount(tgt[erased], minlength=k) / erased.sum()
    assert all(within(p, 1 / k, int(erased.sum())) for p in counts)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"episodes": 0}, "episodes=0"),
        ({"n_timepoints": 0}, "n_timepoints=0"),
        ({"episodes": 2.5}, "episodes=2.5"),
    ],
)
def test_generation_argument_errors(kwargs: dict, message: str) -> None:
    law = reference_law_registry().get_law("E1")
    args = {"episodes": 2, "n_timepoints": 3, "rng": np.random.default_rng(0), **kwargs}
    with pytest.raises(LawError, match=message):
        generate_episodes(law, **args)


def test_generation_refuses_a_legacy_seed() -> None:
    law = reference_law_registry().get_law("E1")
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        generate_episodes(law, 2, 3, 123)
