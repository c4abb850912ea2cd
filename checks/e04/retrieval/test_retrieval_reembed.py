"""The audit's re-embedding with the embedded MiniLM default: honest vectors agree within the
plan's cache.conflict_atol whatever the batch they were made in; a swapped one does not."""

import pytest

pytestmark = pytest.mark.software

import hashlib
import json
from pathlib import Path

import numpy as np

from prereg.e04.backends import build_backend
from prereg.e04.runvectors import RunTexts, RunVectors, reembed_findings

PLAN = Path(__file__).resolve().parents[3] / "plans" / "E04_PLAN.json"
TEXTS = [
    "func (r *Runner) Run() error {\n\treturn r.executor.Run(r.build)\n}",
    "restore the build cache before the job starts",
    "func parseConfig(path string) (*Config, error) {\n\treturn load(path)\n}",
    "package main",
]


@pytest.mark.slow
def test_minilm_reembedding_agrees_within_the_plans_tolerance_and_flags_a_swapped_vector():
    embedding = json.loads(PLAN.read_text())["stages"]["e04"]["parameters"]["embedding"]
    atol = json.loads(PLAN.read_text())["stages"]["e04"]["parameters"]["cache"]["conflict_atol"]
    backend = build_backend(embedding)
    # The run's vectors came from one batch; the audit re-embeds one text at a time.
    held = backend.embed(TEXTS)
    keys = [hashlib.sha256(t.encode()).hexdigest() for t in TEXTS]
    order = np.argsort(keys)
    texts = RunTexts(
        texts=dict(zip(keys, TEXTS)), labels={k: f"text {i}" for i, k in enumerate(keys)}
    )
    bound = RunVectors(
        Path("e04_vectors.npy"), embedding["identity"], [keys[i] for i in order], held[order]
    )
    single = np.vstack([backend.embed([t]) for t in TEXTS])
    assert float(np.max(np.abs(single - held))) <= atol
    assert reembed_findings(backend, bound, texts, sorted(keys), atol) == []
    poisoned = bound.matrix.copy()
    poisoned[[0, 1]] = bound.matrix[[1, 0]]
    bad = RunVectors(bound.path, bound.identity, bound.keys, poisoned)
    (finding,) = reembed_findings(backend, bad, texts, sorted(keys), atol)
    assert "2 of 4 re-embedded vectors differ" in finding and "e04_vectors.npy" in finding
