"""What a user gets from a wheel, end to end.

prereg is built as a wheel from the checkout's committed files (HEAD) and installed, with only its
core dependencies (``-c constraints/main.txt``), into a fresh virtual environment outside
any checkout. In another folder a user then types ``prereg init``, writes a stage, approves,
runs it serially and with ``-n 2``, audits both runs and writes their report: every command
is that environment's console script, started in the project without ``PYTHONPATH`` or
``PYTEST_*`` variables. The environment's ``bin`` is on ``sys.path`` there (Python puts a
started script's folder first); the gate accepts it while nothing in it can be imported.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.distributions import fake_distribution
from support.toy import EXPERIMENT, PINS, stage_spec
from support.wheelhouse import ok, run, user_env

pytestmark = [pytest.mark.software, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STAGE = "toy"


@pytest.fixture(scope="module")
def venv(tmp_path_factory, head_wheel: Path) -> Path:
    """A fresh environment outside any checkout, holding prereg's wheel and its core
    dependencies, made with the interpreter this check's environment was made from."""
    base = tmp_path_factory.mktemp("wheel")
    outer, wheel = user_env(base / "none"), head_wheel
    interpreter = getattr(sys, "_base_executable", None) or sys.executable
    env_dir = base / "venv"
    ok(run([interpreter, "-m", "venv", env_dir], base, outer))
    constraints = ROOT / "constraints" / "main.txt"
    python = env_dir / "bin" / "python"
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    ok(run([*pip, "-c", constraints, wheel], base, user_env(env_dir)))
    where = ok(
        run([python, "-c", "import prereg; print(prereg.__file__)"], base, user_env(env_dir))
    )
    assert "site-packages" in where.stdout and str(ROOT) not in where.stdout, where.stdout
    return env_dir


def new_study(folder: Path, venv: Path) -> Path:
    """``prereg init study`` in ``folder``, then a toy stage committed as a user would."""
    env = user_env(venv)
    study = init_study(folder, venv)
    spec = stage_spec(STAGE)
    plan = {
        "plan_id": "toy-1.0",
        "protocol": "a user's first stage",
        "environment_pins": PINS,
        "stages": {STAGE: spec},
    }
    (study / "plans" / "TOY_PLAN.json").write_text(json.dumps(plan, indent=2))
    (study / spec["module"]).write_text(EXPERIMENT.format(stage=STAGE))
    ini = (study / "pytest.ini").read_text()
    assert "prereg_plans =\n" in ini, ini
    (study / "pytest.ini").write_text(
        ini.replace("prereg_plans =\n", "prereg_plans = plans/TOY_PLAN.json\n")
    )
    commit(study, env, "A toy stage")
    return study


def init_study(folder: Path, venv: Path, *options: str) -> Path:
    """``prereg init [options] study`` in a new ``folder``, with a git identity set."""
    env = user_env(venv)
    folder.mkdir()
    ok(run([venv / "bin" / "prereg", "init", *options, "study"], folder, env))
    study = folder / "study"
    for args in (["config", "user.email", "r@example.org"], ["config", "user.name", "R"]):
        ok(run(["git", *args], study, env))
    return study


def commit(study: Path, env: dict[str, str], message: str) -> None:
    ok(run(["git", "add", "-A"], study, env))
    ok(run(["git", "commit", "-q", "-m", message], study, env))


def approve(study: Path, venv: Path, run_id: str) -> subprocess.CompletedProcess:
    return run(
        [
            venv / "bin" / "prereg",
            "approve",
            "--stage",
            STAGE,
            "--run-id",
            run_id,
            "--accept-deviations",
        ],
        study,
        user_env(venv),
    )


def item_outputs(study: Path, run_id: str) -> dict[str, bytes]:
    items = study / "runs" / run_id / "items"
    return {
        p.relative_to(items).as_posix(): p.read_bytes()
        for p in sorted(items.rglob("*"))
        if p.is_file()
    }


def test_a_wheel_installed_outside_any_checkout_approves_runs_audits_and_reports(venv, tmp_path):
    study = new_study(tmp_path / "work", venv)
    env = user_env(venv)
    prereg, pytest_ = venv / "bin" / "prereg", venv / "bin" / "pytest"
    checked = ok(run([pytest_, "-m", "software"], study, env))
    assert "2 passed" in checked.stdout, checked.stdout

    today = time.strftime("%Y%m%d", time.gmtime())
    runs = {"serial": f"{STAGE}-{today}-001", "two workers": f"{STAGE}-{today}-002"}
    for how, run_id in runs.items():
        ok(approve(study, venv, run_id))
        commit(study, env, f"Approve {run_id}")
        workers = ["-n", "2"] if how == "two workers" else []
        done = ok(run([pytest_, f"--research-stage={STAGE}", *workers], study, env))
        assert f"run {run_id} complete" in done.stdout, done.stdout
    for run_id in runs.values():
        ok(run([prereg, "audit", f"runs/{run_id}"], study, env))
    ok(run([prereg, "report", *(f"runs/{r}" for r in runs.values())], study, env))
    for run_id in runs.values():
        page = study / "runs" / "reports" / f"{run_id}.html"
        assert page.is_file() and "<html" in page.read_text().lower(), page

    serial, parallel = (item_outputs(study, r) for r in runs.values())
    assert sorted(serial) == [f"test_cell[cell{c}]/result.json" for c in range(4)], sorted(serial)
    assert serial == parallel, "the same approved stage wrote different item outputs"


def test_importable_code_in_the_environments_bin_is_refused(venv, tmp_path):
    """The console script's folder is on sys.path: a module or package put there would be
    importable during collection, after the gate, so each is refused by name."""
    study = new_study(tmp_path / "work", venv)
    run_id = f"{STAGE}-{time.strftime('%Y%m%d', time.gmtime())}-001"
    scripts = venv / "bin"
    stray, package = scripts / "helpers.py", scripts / "toolkit"
    try:
        stray.write_text("VALUE = 1\n")
        package.mkdir()
        (package / "__init__.py").write_text("")
        refused = approve(study, venv, run_id)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"file {stray} in the scripts folder on sys.path" in refused.stderr, refused.stderr
        assert "not listed in the RECORD" in refused.stderr, refused.stderr
        assert f"folder {package} in the scripts folder on sys.path" in refused.stderr
        assert not (study / "plans" / "approvals" / f"{run_id}.json").exists()
    finally:
        stray.unlink(missing_ok=True)
        shutil.rmtree(package, ignore_errors=True)
    ok(approve(study, venv, run_id))  # the same environment without them


REWRITER = """
def pytest_runtest_teardown(item):
    research = getattr(item, "funcargs", {}).get("research")
    if research is not None:
        (research.outputs / "result.json").write_text('{"x": [0, 0, 0]}')
"""


def test_a_plugin_installed_after_approval_is_refused_and_never_loads(venv, tmp_path):
    """A ``pytest11`` plugin that rewrites outputs, installed after the approval: the run is
    refused before spending (environment-lock); once removed, the same approval runs clean."""
    study = new_study(tmp_path / "work", venv)
    env = user_env(venv)
    run_id = f"{STAGE}-{time.strftime('%Y%m%d', time.gmtime())}-001"
    ok(approve(study, venv, run_id))
    commit(study, env, f"Approve {run_id}")
    (site,) = (venv / "lib").glob("python*/site-packages")
    meta = fake_distribution(
        site, "rewriter", {"rewriter_plugin.py": REWRITER},
        {"entry_points.txt": "[pytest11]\nrewriter = rewriter_plugin\n"},
    )  # fmt: skip
    try:
        done = run([venv / "bin" / "pytest", f"--research-stage={STAGE}"], study, env)
        assert done.returncode == 4, done.stdout + done.stderr
        assert "[environment-lock]" in done.stderr and "rewriter" in done.stderr, done.stderr
        assert not (study / "runs" / run_id / "start.json").exists()
    finally:
        shutil.rmtree(meta)
        (site / "rewriter_plugin.py").unlink()
    ok(run([venv / "bin" / "pytest", f"--research-stage={STAGE}"], study, env))
    ok(run([venv / "bin" / "prereg", "audit", f"runs/{run_id}"], study, env))
    results = item_outputs(study, run_id)
    assert all(b'"x": [0, 0, 0]' not in data for data in results.values()), results


# Run by the venv's own Python: replaces pluggy's cached bytecode of pluggy/_hooks.py with a
# compilation of other source under a header that still matches, so Python would load it.
PLANT_PLUGGY_PYC = """
import importlib.util, marshal, sys, pluggy._hooks as hooks
from pathlib import Path
source = Path(hooks.__file__)
pyc = Path(importlib.util.cache_from_source(str(source)))
if sys.argv[1] == "plant":
    Path(sys.argv[2]).write_bytes(pyc.read_bytes())
    st = source.stat()
    code = compile(source.read_text() + "\\nPLANTED = 1\\n", str(source), "exec", dont_inherit=True)
    header = (0).to_bytes(4, "little") + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    header += (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.write_bytes(importlib.util.MAGIC_NUMBER + header + marshal.dumps(code))
else:
    pyc.write_bytes(Path(sys.argv[2]).read_bytes())
print(pyc)
"""


def test_planted_bytecode_of_the_installed_harness_is_refused_by_the_session(venv, tmp_path):
    """The launcher leaves the installed harness's bytecode to the session, which loads the
    same files: a planted pluggy pyc is refused there, before the run id is spent."""
    study = new_study(tmp_path / "work", venv)
    env = user_env(venv)
    run_id = f"{STAGE}-{time.strftime('%Y%m%d', time.gmtime())}-001"
    ok(approve(study, venv, run_id))
    commit(study, env, f"Approve {run_id}")
    saved = tmp_path / "genuine.pyc"
    python = str(venv / "bin" / "python")
    pyc = ok(run([python, "-c", PLANT_PLUGGY_PYC, "plant", str(saved)], study, env)).stdout.strip()
    try:
        done = run([venv / "bin" / "pytest", f"--research-stage={STAGE}"], study, env)
        assert done.returncode == 4, done.stdout + done.stderr
        assert f"[execution] bytecode {pyc} of pluggy" in done.stderr, done.stderr
        assert not (study / "runs" / run_id / "start.json").exists()
    finally:
        ok(run([python, "-c", PLANT_PLUGGY_PYC, "restore", str(saved)], study, env))
    ok(run([venv / "bin" / "pytest", f"--research-stage={STAGE}"], study, env))


LATE_IMPORT = """

@pytest.fixture(autouse=True)
def _helper_imported_by_each_item():
    import helperlib  # an installed module first imported while an item runs

    assert helperlib.VALUE == 1
"""


def test_an_installed_module_edited_in_place_and_imported_by_an_item_ends_the_run_incomplete(
    venv, tmp_path
):
    """An installed package's file edited after approval behind RECORD's back (the lock binds
    RECORD, which did not change), first imported while an item runs, after the gate and the
    collection check: the execution condition judged again at the end names the file, the
    run is incomplete, and the audit finds it."""
    study = new_study(tmp_path / "work", venv)
    env = user_env(venv)
    (site,) = (venv / "lib").glob("python*/site-packages")
    meta = fake_distribution(site, "helperlib", {"helperlib.py": "VALUE = 1\n"}, {})
    module = study / stage_spec(STAGE)["module"]
    try:
        module.write_text(module.read_text() + LATE_IMPORT)
        commit(study, env, "Items use helperlib")
        run_id = f"{STAGE}-{time.strftime('%Y%m%d', time.gmtime())}-001"
        ok(approve(study, venv, run_id))
        commit(study, env, f"Approve {run_id}")
        (site / "helperlib.py").write_text("VALUE = 1  # edited in place\n")
        done = run([venv / "bin" / "pytest", f"--research-stage={STAGE}"], study, env)
        assert done.returncode != 0, done.stdout + done.stderr
        manifest = json.loads((study / "runs" / run_id / "manifest.json").read_text())
        assert manifest["status"] == "incomplete", manifest["incomplete_reasons"]
        (problem,) = manifest["environment"]["execution_at_end"]
        assert "helperlib" in problem and str(site / "helperlib.py") in problem, problem
        assert any("helperlib" in r for r in manifest["incomplete_reasons"])
        audit = run([venv / "bin" / "prereg", "audit", f"runs/{run_id}"], study, env)
        assert audit.returncode == 1 and "helperlib" in audit.stdout, audit.stdout
    finally:
        shutil.rmtree(meta)
        (site / "helperlib.py").unlink()


def test_a_scaffolded_stage_is_rehearsed_approved_run_twice_identically_audited_and_reported(
    venv, tmp_path
):
    """The newcomer's path on a wheel: ``prereg init --stage``, the software checks, a
    rehearsal (nothing spent), ``prereg approve`` taking the next free run id and naming no
    deviation (the plan pins torch, absent from this environment, as not installed), a
    serial run and a two-worker run with byte-identical outputs, clean audits and the
    report."""
    env = user_env(venv)
    prereg, pytest_ = venv / "bin" / "prereg", venv / "bin" / "pytest"
    stage = "my-study"
    study = init_study(tmp_path / "work", venv, "--stage", stage)
    commit(study, env, "Preregister my-study")
    ok(run([pytest_, "-m", "software"], study, env))

    rehearsal = ok(run([pytest_, f"--research-stage={stage}", "--rehearse", "-k", "0"], study, env))
    assert "rehearsal: not a run, nothing spent" in rehearsal.stdout, rehearsal.stdout
    refs = ok(run(["git", "for-each-ref", "--format=%(refname)", "refs/prereg"], study, env))
    assert refs.stdout.startswith(f"refs/prereg/rehearsals/{stage}/")  # disclosed, nothing spent
    assert len(refs.stdout.split()) == 1, refs.stdout

    run_ids = []
    for workers in ([], ["-n", "2"]):
        approved = ok(run([prereg, "approve", "--stage", stage], study, env))
        (run_id,) = set(re.findall(rf"\b{stage}-[0-9]{{8}}-[0-9]{{3}}\b", approved.stdout))
        record = json.loads((study / "plans" / "approvals" / f"{run_id}.json").read_text())
        assert record["environment"]["torch"] is None and record["deviations"] == [], record
        commit(study, env, f"Approve {run_id}")
        done = ok(run([pytest_, f"--research-stage={stage}", *workers], study, env))
        assert f"run {run_id} complete" in done.stdout, done.stdout
        audit = ok(run([prereg, "audit", f"runs/{run_id}"], study, env))
        assert "clean" in audit.stdout and "replayed" in audit.stdout, audit.stdout
        assert "(installed, no git commit)" in audit.stdout, audit.stdout
        run_ids.append(run_id)
    assert run_ids[0] != run_ids[1] and run_ids[1].endswith("-002"), run_ids
    ok(run([prereg, "report", *(f"runs/{r}" for r in run_ids)], study, env))
    serial, parallel = (item_outputs(study, r) for r in run_ids)
    assert serial and serial == parallel, "the same approved stage wrote different item outputs"
    summaries = [
        {p.name: p.read_bytes() for p in (study / "runs" / r / "summary").rglob("*") if p.is_file()}
        for r in run_ids
    ]
    assert summaries[0] and summaries[0] == summaries[1]


def test_a_torch_the_plan_pins_as_not_installed_is_refused_when_present_in_either_form(
    venv, tmp_path
):
    """The scaffolded plan pins torch, absent here, as not installed. A torch distribution
    (only its metadata) planted in site-packages is a deviation ``prereg approve`` names;
    a bare ``torch`` package without a distribution, imported by the stage's kind, is loaded
    code outside every RECORD. Each is refused and writes no approval."""
    env = user_env(venv)
    prereg = venv / "bin" / "prereg"
    study = init_study(tmp_path / "work", venv, "--stage", "my-study")
    commit(study, env, "Preregister my-study")
    where = ok(run([venv / "bin" / "python", "-c", PURELIB], study, env)).stdout.strip()
    site = Path(where)
    metadata, package = site / "torch-9.9.dist-info", site / "torch"
    approve_ = [prereg, "approve", "--stage", "my-study"]
    try:
        metadata.mkdir()
        (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9\n")
        refused = run(approve_, study, env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "torch: plan pins 'not installed', here '9.9'" in refused.stderr, refused.stderr
        shutil.rmtree(metadata)

        package.mkdir()
        (package / "__init__.py").write_text('__version__ = "2.8.0"\n')
        kind = study / "src" / "my_study" / "kind.py"
        future = "from __future__ import annotations\n"
        assert future in kind.read_text()
        kind.write_text(kind.read_text().replace(future, future + "import torch  # noqa\n", 1))
        commit(study, env, "The kind imports torch")
        refused = run(approve_, study, env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"loaded code torch from {package / '__init__.py'}" in refused.stderr
        assert "not listed in the RECORD" in refused.stderr, refused.stderr
    finally:
        shutil.rmtree(metadata, ignore_errors=True)
        shutil.rmtree(package, ignore_errors=True)
    assert list((study / "plans" / "approvals").glob("*.json")) == []


PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
