import pytest

pytestmark = pytest.mark.software

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from prereg.e04.embeddings import (
    EmbeddingBackend,
    EmbeddingInputError,
    LMStudioBackend,
    LMStudioResidencyError,
    LMStudioUnavailableError,
    identity_sha256,
    lmstudio_client,
)
from support.checkout import CHECKS
from support.e04_doubles import FakeLMStudio

KEY = "text-embedding-nomic-embed-text-v1.5"
SHA = "ab" * 32


def backend(client: FakeLMStudio, **overrides) -> LMStudioBackend:
    arguments = {
        "weights_sha256": SHA,
        "max_sequence_length": 512,
        "dimension": 16,
        "chunker_version": "c1",
    }
    arguments.update(overrides)
    return LMStudioBackend(client, KEY, **arguments)


def only_embedder() -> FakeLMStudio:
    return FakeLMStudio({"emb-1": ("embedding", KEY)})


def test_the_pinned_model_alone_embeds_normalised_vectors() -> None:
    client = only_embedder()
    b = backend(client)
    assert isinstance(b, EmbeddingBackend)
    listed = client.list_calls
    vectors = b.embed(["func Run()", "type Runner struct{}"])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 16)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    # residency listed before and after (two namespaces each time)
    assert client.list_calls - listed == 4 and client.embed_calls == 1
    assert np.array_equal(vectors, b.embed(["func Run()", "type Runner struct{}"]))


def test_identity_is_stable_and_names_the_pins() -> None:
    identity = backend(only_embedder()).identity()
    assert identity["model"] == KEY and identity["weights_sha256"] == SHA
    assert identity["max_sequence_length"] == 512 and identity["normalisation"] == "l2"
    assert identity["chunker_version"] == "c1"
    assert identity_sha256(identity) == identity_sha256(dict(reversed(identity.items())))
    assert identity_sha256(backend(only_embedder(), chunker_version="c2").identity()) != (
        identity_sha256(identity)
    )


def test_nothing_loaded_is_refused() -> None:
    with pytest.raises(LMStudioResidencyError, match="loaded: nothing"):
        backend(FakeLMStudio({}))


def test_an_llm_beside_the_embedder_is_refused() -> None:
    client = FakeLMStudio({"emb-1": ("embedding", KEY), "qwen3-8b": ("llm", "qwen/qwen3-8b")})
    with pytest.raises(LMStudioResidencyError, match=r"llm 'qwen3-8b'.*embedding 'emb-1'"):
        backend(client)


def test_two_embedding_models_are_refused() -> None:
    client = FakeLMStudio({"emb-1": ("embedding", KEY), "emb-2": ("embedding", "other")})
    with pytest.raises(LMStudioResidencyError, match="emb-2"):
        backend(client)


def test_the_wrong_model_is_refused() -> None:
    client = FakeLMStudio({"x": ("embedding", "bge-small")})
    with pytest.raises(LMStudioResidencyError, match="'bge-small'.*not the pinned"):
        backend(client)


def test_a_wrong_context_length_is_refused() -> None:
    with pytest.raises(LMStudioResidencyError, match="context length 2048"):
        backend(FakeLMStudio({"emb-1": ("embedding", KEY)}, context_length=2048))


def test_a_model_loaded_mid_run_is_detected_after_embedding() -> None:
    def load_qwen(client: FakeLMStudio) -> None:
        client.loaded["qwen"] = ("llm", "qwen/qwen3-8b")

    client = FakeLMStudio({"emb-1": ("embedding", KEY)})
    b = backend(client)
    client.during_embed = load_qwen
    with pytest.raises(LMStudioResidencyError, match="llm 'qwen'"):
        b.embed(["func Run()"])


def test_a_reloaded_instance_mid_run_is_detected() -> None:
    def reload(client: FakeLMStudio) -> None:
        client.loaded = {"emb-2": ("embedding", KEY)}

    client = FakeLMStudio({"emb-1": ("embedding", KEY)})
    b = backend(client)
    client.during_embed = reload
    with pytest.raises(LMStudioResidencyError, match="changed during embedding"):
        b.embed(["func Run()"])


def test_weights_are_verified_against_models_dir(tmp_path: Path) -> None:
    weights = tmp_path / "publisher" / KEY / f"{KEY}.gguf"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"gguf weights")
    good = hashlib.sha256(b"gguf weights").hexdigest()
    backend(only_embedder(), weights_sha256=good, models_dir=tmp_path).embed(["x"])
    with pytest.raises(LMStudioResidencyError, match="hash to"):
        backend(only_embedder(), models_dir=tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"weights_sha256": "xyz"}, "weights_sha256='xyz'"),
        ({"dimension": 0}, "dimension=0"),
        ({"chunker_version": ""}, "chunker_version=''"),
    ],
)
def test_bad_parameters_are_refused(overrides: dict, message: str) -> None:
    with pytest.raises(EmbeddingInputError, match=message):
        backend(only_embedder(), **overrides)


def test_texts_must_be_a_list_of_str() -> None:
    b = backend(only_embedder())
    with pytest.raises(EmbeddingInputError, match="wrap it in a list"):
        b.embed("func Run()")  # type: ignore[arg-type]
    with pytest.raises(EmbeddingInputError, match=r"texts\[1\]"):
        b.embed(["ok", b"bytes"])  # type: ignore[list-item]


def test_no_server_is_a_clear_error() -> None:
    # Port 1 never runs LM Studio: the SDK's probe fails and raises LMStudioClientError.
    with pytest.raises(LMStudioUnavailableError, match="embedded default `minilm`"):  # noqa: SIM117
        with lmstudio_client("localhost:1"):  # nested: Python 3.9 has no "with (a, b):"
            pass


def test_the_lmstudio_path_never_imports_torch(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(CHECKS)!r})
        from support.e04_doubles import FakeLMStudio
        from prereg.e04.cache import VectorCache
        from prereg.e04.embeddings import LMStudioBackend
        from prereg.e04.harness import default_registry
        from prereg.e04.types import GoFunction

        client = FakeLMStudio({{"emb-1": ("embedding", {KEY!r})}})
        backend = LMStudioBackend(client, {KEY!r}, weights_sha256={SHA!r},
                                  max_sequence_length=512, dimension=16, chunker_version="c")
        assert backend.embed(["func Run()"]).shape == (1, 16)
        registry = default_registry()
        spec = registry.spec_from_plan("H008", {{
            "kind": "bm25+dense-rrf", "query_source": "task", "candidate_limit": 5,
            "tokenizer": "prereg-identifier-tokenizer-1",
            "bm25": {{"variant": "lucene", "k1": 1.2, "b": 0.75, "delta": None,
                      "include_path": True}},
            "function_ranking": "dense", "chunk_text": "go-function-text-1",
            "embedding_batch_size": 8, "rrf_k": 60}})
        source = "package a\\nfunc Run() {{}}\\n"
        function = GoFunction("a.go", "Run", None, 2, 2, "func Run() {{}}")
        with VectorCache({str(tmp_path / "c.sqlite")!r}, conflict_atol=0.0,
                         busy_timeout_seconds=5) as cache:
            index = registry.build(spec, {{"a.go": source.encode()}}, [function], backend, cache)
            assert index.search("run").files[0][0] == "a.go"
        assert "torch" not in sys.modules, "torch was imported"
        assert "sentence_transformers" not in sys.modules
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
