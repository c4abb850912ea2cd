"""The project's LMStudioBackend through a real ``lmstudio.Client`` on the LM Studio double.

Every check speaks the SDK's websocket protocol end to end: the guard's refusals, the
weights pin and the cache all see what a real LM Studio server would send.
"""

import pytest

pytestmark = pytest.mark.software

import hashlib
from pathlib import Path

import numpy as np

from prereg.e04.backends import build_backend
from prereg.e04.cache import VectorCache, embed_with_cache_report, text_sha256
from prereg.e04.embeddings import EmbeddingOutputError, LMStudioResidencyError
from prereg.e04.lmstudio_double import LMStudioDouble, double_embedding
from support.e04_doubles import (
    CONTEXT_LENGTH,
    DIMENSION,
    KEY,
    KEY_SHA256,
    LLM_KEY,
    OTHER_KEY,
    pinned_backend,
)

TEXTS = ["func Run() error", "type Runner struct{}", "func (r *Runner) Stop()", "func Run() error"]
#: The only endpoints a residency-guarded embedding client may call.
GUARD_ENDPOINTS = {"listLoaded", "getModelInfo", "embedString"}


def assert_nothing_loaded_by_the_client(double: LMStudioDouble) -> None:
    assert double.residency_calls() == [], double.residency_calls()
    assert {call.endpoint for call in double.calls()} <= GUARD_ENDPOINTS
    assert {call.kind for call in double.calls()} <= {"rpc"}


def plan_embedding(double: LMStudioDouble, **identity_overrides) -> dict:
    """The plan's ``embedding`` section for KEY on this double (as a researcher writes it)."""
    identity = {
        "backend": "lmstudio",
        "model": KEY,
        "weights_sha256": KEY_SHA256,
        "max_sequence_length": CONTEXT_LENGTH,
        "dimension": DIMENSION,
        "normalisation": "l2",
        "dtype": "float32",
        "chunker_version": "go-function-text-1",
    }
    identity.update(identity_overrides)
    return {
        "backend": "lmstudio",
        "identity": identity,
        "encode_batch_size": 2,
        "lmstudio": {"api_host": double.api_host, "models_dir": str(double.models_dir)},
    }


def test_embeddings_from_the_double_reach_the_vector_cache(double, client, tmp_path):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    embedding = plan_embedding(double)
    backend = build_backend(embedding, lmstudio_client=lambda: client)
    identity = embedding["identity"]
    with VectorCache(tmp_path / "v.sqlite", conflict_atol=0.0, busy_timeout_seconds=5) as cache:
        first = embed_with_cache_report(backend, cache, TEXTS, batch_size=2)
        embedded = [c for c in double.calls() if c.endpoint == "embedString"]
        again = embed_with_cache_report(backend, cache, TEXTS, batch_size=2)
        stored = cache.get_many(identity, [text_sha256(t) for t in TEXTS])
        assert cache.count(identity) == len(set(TEXTS))
    assert (first.misses, first.hits, first.backend_calls) == (3, 0, 2)
    # one embedString per unique text, each naming the pinned instance by identifier
    assert sorted(c.parameter["inputString"] for c in embedded) == sorted(set(TEXTS))
    assert {c.parameter["modelSpecifier"]["query"]["identifier"] for c in embedded} == {KEY}
    assert (again.hits, again.misses, again.backend_calls) == (3, 0, 0)
    assert len([c for c in double.calls() if c.endpoint == "embedString"]) == len(embedded)
    for text, vector in zip(TEXTS, first.vectors):
        raw = np.asarray(double_embedding(KEY, text, DIMENSION), dtype=np.float64)
        np.testing.assert_allclose(vector, raw / np.linalg.norm(raw), rtol=1e-6)
        np.testing.assert_array_equal(stored[text_sha256(text)], vector)
    np.testing.assert_array_equal(first.vectors, again.vectors)
    assert_nothing_loaded_by_the_client(double)


def _load_nothing(double: LMStudioDouble) -> None:
    pass


def _load_two_embedders(double: LMStudioDouble) -> None:
    double.load(KEY, context_length=CONTEXT_LENGTH)
    double.load(OTHER_KEY, context_length=CONTEXT_LENGTH)


def _load_llm_beside(double: LMStudioDouble) -> None:
    double.load(KEY, context_length=CONTEXT_LENGTH)
    double.load(LLM_KEY, kind="llm")


def _load_the_wrong_key(double: LMStudioDouble) -> None:
    double.load(OTHER_KEY, context_length=CONTEXT_LENGTH)


def _load_the_pinned_key_twice(double: LMStudioDouble) -> None:
    double.load(KEY, context_length=CONTEXT_LENGTH)
    double.load(KEY, context_length=CONTEXT_LENGTH)


def _load_another_context_length(double: LMStudioDouble) -> None:
    double.load(KEY, context_length=CONTEXT_LENGTH * 2)


@pytest.mark.parametrize(
    ("residency", "message"),
    [
        (_load_nothing, "loaded: nothing"),
        (_load_two_embedders, f"embedding '{KEY}', embedding '{OTHER_KEY}'"),
        (_load_llm_beside, f"llm '{LLM_KEY}', embedding '{KEY}'"),
        (_load_the_wrong_key, f"'{OTHER_KEY}'.*not the pinned '{KEY}'"),
        (_load_the_pinned_key_twice, f"embedding '{KEY}', embedding '{KEY}:2'"),
        (_load_another_context_length, f"context length {CONTEXT_LENGTH * 2}"),
    ],
    ids=["no-model", "two-models", "llm-loaded", "wrong-key", "two-instances", "context"],
)
def test_the_guard_refuses_anything_but_the_pinned_model_alone(double, client, residency, message):
    residency(double)
    with pytest.raises(LMStudioResidencyError, match=message):
        pinned_backend(client, double)
    assert [c for c in double.calls() if c.endpoint == "embedString"] == []
    assert_nothing_loaded_by_the_client(double)


def _swap_to_other_key(double: LMStudioDouble) -> None:
    double.unload(KEY)
    double.load(OTHER_KEY, context_length=CONTEXT_LENGTH)


def _reload_same_key(double: LMStudioDouble) -> None:
    double.unload(KEY)
    double.load(KEY, context_length=CONTEXT_LENGTH)


def _swap_away_and_back(double: LMStudioDouble) -> None:
    _swap_to_other_key(double)
    double.unload(OTHER_KEY)
    double.load(KEY, context_length=CONTEXT_LENGTH)


def _load_llm(double: LMStudioDouble) -> None:
    double.load(LLM_KEY, kind="llm")


def _unload_all(double: LMStudioDouble) -> None:
    double.unload_all()


SWAPS = [
    (_swap_to_other_key, f"'{OTHER_KEY}'.*not the pinned"),
    (_reload_same_key, "changed since this backend pinned it"),
    (_swap_away_and_back, "changed since this backend pinned it"),
    (_load_llm, f"llm '{LLM_KEY}'"),
    (_unload_all, "loaded: nothing"),
]
SWAP_IDS = ["other-key", "reload-same-key", "away-and-back", "llm-loaded", "unloaded"]


@pytest.mark.parametrize(("change", "message"), SWAPS, ids=SWAP_IDS)
def test_a_model_changed_between_two_calls_is_refused(double, client, change, message):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    backend = pinned_backend(client, double)
    first = backend.embed(TEXTS[:2])
    assert first.shape == (2, DIMENSION)
    change(double)
    with pytest.raises(LMStudioResidencyError, match=message):
        backend.embed(TEXTS[2:])
    # the refusal came from the residency check before the second call embedded anything
    assert len([c for c in double.calls() if c.endpoint == "embedString"]) == 2
    assert double.residency_calls() == []  # the double's own changes are not client calls


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_reload_same_key, "changed during embedding"),
        (_swap_away_and_back, "changed during embedding"),
        (_swap_to_other_key, f"'{OTHER_KEY}'.*not the pinned"),
        (_load_llm, f"llm '{LLM_KEY}'"),
    ],
    ids=["reload-same-key", "away-and-back", "other-key", "llm-loaded"],
)
def test_a_model_changed_during_a_call_discards_its_vectors(double, client, change, message):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    backend = pinned_backend(client, double)
    double.on_next("embedString", change)  # between the guard's check before and after
    with pytest.raises(LMStudioResidencyError, match=message):
        backend.embed(TEXTS[:1])
    assert_nothing_loaded_by_the_client(double)


def test_the_pinned_weights_file_the_server_reports_is_hashed(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    weights = double.weights_path(KEY)
    assert weights is not None and weights.is_file()
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == KEY_SHA256
    info = client.embedding.list_loaded()[0].get_info()
    assert Path(double.models_dir / info.path) == weights  # the path the SDK receives
    pinned_backend(client, double).embed(TEXTS[:1])


def test_a_wrong_weights_hash_in_the_plan_is_refused(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    wrong = "0" * 64
    with pytest.raises(
        LMStudioResidencyError, match=f"hash to {KEY_SHA256}.*pins weights_sha256={wrong}"
    ):
        build_backend(plan_embedding(double, weights_sha256=wrong), lmstudio_client=lambda: client)
    assert_nothing_loaded_by_the_client(double)


def test_weights_replaced_on_disk_are_refused(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    double.weights_path(KEY).write_bytes(b"other weights under the same model key")
    with pytest.raises(LMStudioResidencyError, match="hash to"):
        pinned_backend(client, double)


def test_weights_missing_under_models_dir_are_refused(double, client, tmp_path):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    with pytest.raises(LMStudioResidencyError, match="not found under models_dir"):
        pinned_backend(client, double, models_dir=tmp_path / "elsewhere")


def test_a_dimension_other_than_the_served_one_is_refused(double, client):
    double.load(KEY, context_length=CONTEXT_LENGTH)
    backend = build_backend(plan_embedding(double), lmstudio_client=lambda: client)
    assert backend.identity() == plan_embedding(double)["identity"]
    wider = build_backend(
        plan_embedding(double, dimension=DIMENSION + 1), lmstudio_client=lambda: client
    )
    with pytest.raises(EmbeddingOutputError, match=f"shape \\(1, {DIMENSION}\\)"):
        wider.embed(TEXTS[:1])


def test_a_client_entered_and_held_stays_open(double):
    # The stage enters lmstudio_client(...) once per process and keeps only the client; a
    # generator-based context manager closed that client when it was garbage collected,
    # so the first real call failed ("AsyncTaskManager ... is currently inactive").
    import gc

    from prereg.e04.embeddings import lmstudio_client

    double.load(KEY, context_length=CONTEXT_LENGTH)
    client = lmstudio_client(double.api_host).__enter__()
    try:
        gc.collect()
        assert pinned_backend(client, double).embed(TEXTS[:1]).shape == (1, DIMENSION)
    finally:
        client.close()
