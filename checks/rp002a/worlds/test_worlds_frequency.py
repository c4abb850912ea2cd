import pytest
from planlaws import reference_law_registry

pytestmark = pytest.mark.software

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from prereg.base.seeds import numpy_generator
from prereg.rp002a.frequency import (
    FrequencyTable,
    FrequencyTableError,
    fit_frequency_table,
    frequency_predictions,
)
from prereg.rp002a.ideal import ideal_current_predictions
from prereg.rp002a.laws import generate_episodes


def test_hand_computed_table() -> None:
    # Pairs (obs, target): (0,0) (0,1) (0,0) (4,3) | (1,1) (4,2) (4,3) (0,0).
    obs = np.array([[0, 0, 0, 4], [1, 4, 4, 0]], dtype=np.uint8)
    tgt = np.array([[0, 1, 0, 3], [1, 2, 3, 0]], dtype=np.uint8)
    table = fit_frequency_table(obs, tgt, n_symbols=5, n_classes=4)
    np.testing.assert_array_equal(
        table.counts, [[3, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 2]]
    )
    np.testing.assert_allclose(table.probabilities[0], [0.75, 0.25, 0, 0])
    np.testing.assert_allclose(table.probabilities[4], [0, 0, 1 / 3, 2 / 3])
    # Symbols 2 and 3 never occur in training: uniform rows, and they are listed.
    assert table.unseen_symbols == (2, 3)
    np.testing.assert_array_equal(table.probabilities[2], [0.25] * 4)
    predictions = frequency_predictions(table, np.array([[2, 0, 4]], dtype=np.uint8))
    np.testing.assert_allclose(predictions[0], table.probabilities[[2, 0, 4]])
    record = table.to_record()
    assert record["unseen_symbols"] == [2, 3] and record["counts"][0] == [3, 1, 0, 0]


@settings(max_examples=60, deadline=None)
@given(
    data=hnp.arrays(
        np.uint8, hnp.array_shapes(min_dims=2, max_dims=2, max_side=6), elements=st.integers(0, 19)
    )
)
def test_table_properties(data: np.ndarray) -> None:
    obs, tgt = data // 4, data % 4  # 5 symbols x 4 classes
    table = fit_frequency_table(obs, tgt, 5, 4)
    assert table.counts.sum() == obs.size
    np.testing.assert_allclose(table.probabilities.sum(axis=1), 1.0, atol=1e-12)
    seen = np.unique(obs)
    assert set(table.unseen_symbols) == set(range(5)) - set(seen.tolist())
    predictions = frequency_predictions(table, obs)
    assert predictions.shape == obs.shape + (4,)
    # B0 uses only the current observation: equal symbols, equal rows.
    for symbol in seen:
        rows = predictions[obs == symbol]
        assert np.all(rows == rows[0])


def test_b0_approaches_the_ideal_current_predictor() -> None:
    law = reference_law_registry().get_law("E1")
    obs, tgt = generate_episodes(law, 4096, 129, numpy_generator("test-worlds", "b0"))
    table = fit_frequency_table(obs, tgt, law.n_symbols, law.n_states)
    ideal = ideal_current_predictions(law, np.arange(law.n_symbols, dtype=np.uint8)[None, :])[0]
    # ~105,000 timepoints per symbol: standard error of a cell <= 0.0016.
    np.testing.assert_allclose(table.probabilities, ideal, atol=0.008)


def test_errors_name_the_argument() -> None:
    obs = np.zeros((2, 3), dtype=np.uint8)
    with pytest.raises(FrequencyTableError, match="observations holds values in \\[0, 5\\]"):
        fit_frequency_table(np.array([[0, 5]]), np.array([[0, 1]]), 5, 4)
    with pytest.raises(FrequencyTableError, match="targets holds values"):
        fit_frequency_table(obs, obs + 4, 5, 4)
    with pytest.raises(FrequencyTableError, match="n_classes=0"):
        fit_frequency_table(obs, obs, 5, 0)
    with pytest.raises(FrequencyTableError, match="shape"):
        fit_frequency_table(obs, obs[:, :2], 5, 4)
    with pytest.raises(FrequencyTableError, match="dtype"):
        fit_frequency_table(obs.astype(float), obs, 5, 4)
    table = fit_frequency_table(obs, obs, 5, 4)
    assert isinstance(table, FrequencyTable)
    with pytest.raises(FrequencyTableError, match="observations holds values"):
        frequency_predictions(table, np.array([[7]]))
    with pytest.raises(TypeError, match="FrequencyTable"):
        frequency_predictions(np.ones((5, 4)), obs)
