"""A newcomer's project holding the paired-models example, laid out as
docs/how-to/worked-example.md says: ``prereg init``, copy the plan and experiments
module from ``examples/prereg-paired-models/project/``, name the plan in pytest.ini, commit."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from prereg.testing import ScratchProject

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "prereg-paired-models"
PLAN = Path("plans") / "PAIRED_MODELS_PLAN.json"
EXPERIMENTS = Path("experiments") / "test_paired_models.py"
STAGE = "paired-models"
PACKAGE = "prereg_paired_models"


def require_installed_example() -> None:
    """The example package is installed (install.sh does it) and equals its source here."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        pytest.fail(f"{PACKAGE} is not installed: run bash install.sh (it installs examples/)")
    installed = Path(spec.origin).parent
    source = EXAMPLE / "src" / PACKAGE
    stale = [
        p.name
        for p in sorted(source.glob("*.py"))
        if not (installed / p.name).is_file() or (installed / p.name).read_bytes() != p.read_bytes()
    ]
    if stale:
        pytest.fail(
            f"the installed {PACKAGE} differs from {source} in {stale}: run bash install.sh"
        )


def example_project(root: Path, *, replicates: int | None = None) -> ScratchProject:
    """``prereg init`` in ``root``, the example's plan and module copied in and committed.

    ``replicates`` shrinks the plan's grid (a scratch copy for the attack checks only)."""
    require_installed_example()
    project = ScratchProject(root)
    root.mkdir(parents=True)
    project.prereg("init", ".", check=True)
    project.git("config", "user.email", "researcher@example.org")
    project.git("config", "user.name", "Researcher")
    for rel in (PLAN, EXPERIMENTS):
        shutil.copyfile(EXAMPLE / "project" / rel, root / rel)
    if replicates is not None:
        plan = json.loads((root / PLAN).read_text())
        plan["stages"][STAGE]["parameters"]["replicates"] = replicates
        (root / PLAN).write_text(json.dumps(plan, indent=2) + "\n")
    ini = root / "pytest.ini"
    text = ini.read_text()
    assert "\nprereg_plans =\n" in text, text
    ini.write_text(text.replace("\nprereg_plans =\n", f"\nprereg_plans =\n    {PLAN.as_posix()}\n"))
    checked = project.pytest("-m", "software")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    project.commit("Preregister the paired-models comparison")
    return project


def run_stage(project: ScratchProject, run_id: str, *extra: str) -> Path:
    """Approve ``run_id``, commit the approval, run the stage; the run folder."""
    project.approve(STAGE, run_id)
    done = project.pytest(f"--research-stage={STAGE}", f"--run-id={run_id}", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    assert project.manifest(run_id)["status"] == "complete"
    return project.run_dir(run_id)


def result_files(run_dir: Path) -> dict[str, bytes]:
    """Every item output and summary file of a run, by path inside the run folder."""
    return {
        p.relative_to(run_dir).as_posix(): p.read_bytes()
        for folder in ("items", "summary")
        for p in sorted((run_dir / folder).rglob("*"))
        if p.is_file()
    }
