import pytest

pytestmark = pytest.mark.software

import subprocess
import sys
import textwrap
from pathlib import Path

from support.checkout import CHECKS

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[2]

CELL_WITH_LMSTUDIO = """
import sys
sys.path.insert(0, {checks!r})
from support.e04_doubles import FakeLMStudio
from support.e04_project import check_plan
from pathlib import Path
from prereg.e04 import stage as e04
from prereg.e04.backends import build_backend
from prereg.e04.cells import CorpusStore, Workspace, compute_cell
from prereg.e04.plan import Cell, settings_from_parameters
from prereg.base.seeds import numpy_generator

KEY = "text-embedding-nomic-embed-text-v1.5"
plan = check_plan()
params = plan["stages"]["e04"]["parameters"]
params["embedding"]["backend"] = "lmstudio"
params["embedding"]["identity"] = {{
    "backend": "lmstudio", "model": KEY, "weights_sha256": "ab" * 32,
    "max_sequence_length": 512, "dimension": 16, "normalisation": "l2", "dtype": "float32",
    "chunker_version": "go-function-text-1",
}}
params["embedding"]["lmstudio"] = {{"api_host": None, "models_dir": None}}
settings = settings_from_parameters(params)
inputs = {{"repository": Path({repository!r}), "tasks": Path({tasks!r}),
          "reformulations": Path({reformulations!r})}}
loaded = e04.load_inputs(settings, inputs)
client = FakeLMStudio({{"emb-1": ("embedding", KEY)}}, dimension=16, context_length=512)
backend = build_backend(dict(settings.embedding), lmstudio_client=lambda: client)
workspace = Workspace(CorpusStore(inputs["repository"]), backend, e04.open_cache(Path({tmp!r}), settings))
task = loaded.task_file.tasks[0]
for harness in ("H008", "H010"):
    out = compute_cell(Cell(task.task_id, harness, 2, 10), task, settings, workspace,
                       numpy_generator("ns", task.task_id, "distractors"),
                       loaded.reformulations.texts, synthetic=True, seed_derivation="ns")
    assert out.records["s002.json"]["index"]["chunk_vectors_sha256"]
assert client.embed_calls > 0
print("torch" in sys.modules, client.embed_calls)
"""

IMPORTS = """
import importlib.util, sys
import prereg.plugin
spec = importlib.util.spec_from_file_location("test_e04", {module!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print("torch" in sys.modules)
"""


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()


def test_an_e04_cell_on_the_lmstudio_backend_never_imports_torch(tmp_path, e04_fixture):
    code = CELL_WITH_LMSTUDIO.format(
        tmp=str(tmp_path),
        checks=str(CHECKS),
        repository=str(e04_fixture.repository),
        tasks=str(e04_fixture.tasks_file),
        reformulations=str(e04_fixture.reformulations_file),
    )
    torch_loaded, calls = _python(textwrap.dedent(code))
    assert torch_loaded == "False" and int(calls) > 0


def test_the_plugin_and_the_experiment_module_import_no_torch():
    code = IMPORTS.format(module=str(PROJECT / "experiments" / "test_e04.py"))
    assert _python(code) == ["False"]
