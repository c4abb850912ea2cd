"""A user's law family, declared by an installed package, is used by a run.

``examples/prereg-law-family`` declares the family ``sticky-erasure`` under the entry-point
group ``prereg.law_families``; ``install.sh`` installs it (non-editable) into ``.venv``. The
unit checks read it through :mod:`prereg.rp002a.laws`; the refusals use a fake distribution
in a temporary site folder, so they do not depend on the real install. The end-to-end check
runs a tiny RP002A target-variance stage whose plan gives world E1 that family, through the
gate, and audits it: the datasets the run wrote record the family's law.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import pytest

from prereg.evidence import execution
from prereg.kinds import registry
from prereg.records.runs import RunLayout
from prereg.rp002a import laws
from prereg.rp002a.laws import HIDDEN_MARKOV_ERASURE, LawError, LawRegistry, law_registry
from prereg.testing import ScratchProject
from support import rp002a_clone
from support.distributions import fake_distribution

pytestmark = pytest.mark.software

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "prereg-law-family"
DISTRIBUTION = "prereg-law-family"
FAMILY = "sticky-erasure"
MODULE = "prereg_law_family/sticky.py"
# World E1 of the plan, by the example family: a state lasts 8 steps on average, so
# stay_probability = 1 - 1/8 = 0.875 (the shipped E1 has 0.85).
STICKY_E1 = {
    "family": FAMILY,
    "name": "E1",
    "n_states": 4,
    "mean_dwell": 8,
    "erasure_probability": 0.5,
    "target_corruption": 0.48,
    "erased_target": "corrupted",
}
INSTALL = (
    f"the example package {DISTRIBUTION} is not installed in this environment as prereg "
    "uses it; run `bash install.sh` (it installs every package under examples/, not "
    "editable, each built from a copy)"
)


def _installed_example() -> importlib.metadata.Distribution:
    """The installed example distribution, the same code as examples/; else the check fails."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(INSTALL)
    if FAMILY not in registry.installed_names(registry.LAW_FAMILIES):
        pytest.fail(f"{INSTALL}; found {dist.metadata['Name']} {dist.version}, not usable")
    installed = Path(dist.locate_file(MODULE)).read_bytes()
    source = (EXAMPLE / "src" / MODULE).read_bytes()
    if installed != source:
        pytest.fail(
            f"the installed {DISTRIBUTION} differs from {EXAMPLE.relative_to(REPO)}/src/"
            f"{MODULE}: reinstall it (bash install.sh)"
        )
    return dist


# -- unit: the registry finds the installed family, and says where it came from -------------


def test_the_installed_family_builds_a_law_and_names_its_origin():
    dist = _installed_example()
    law = law_registry().law_from_spec(STICKY_E1)
    assert (law.family, law.stay_probability, law.n_states) == (FAMILY, 0.875, 4)
    assert law_registry().law_from_spec(laws.law_to_spec(law)) == law  # a dataset reloads
    where = registry.origin(registry.LAW_FAMILIES, FAMILY)
    assert where == laws.family_origin(FAMILY)
    assert where["distribution"] == f"{DISTRIBUTION} {dist.version}"
    assert where["entry_point"] == "prereg_law_family.sticky:build"
    assert Path(where["file"]) == Path(dist.locate_file(MODULE)).resolve()
    assert any(Path(where["file"]).is_relative_to(site) for site in execution.site_dirs())
    with pytest.raises(LawError, match="mean_dwell"):
        law_registry().law_from_spec({**STICKY_E1, "mean_dwell": 0.5})


TOY_FAMILY = """
from prereg.rp002a.laws import HiddenMarkovLaw


def build(spec):
    return HiddenMarkovLaw(spec["name"], 2, 0.9, 0.25, 0.1, family="toy-burst")
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A temporary site-packages folder, the only one the registry reads; no family loaded yet."""
    folder = (tmp_path / "site-packages").resolve()
    folder.mkdir()
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(folder)])
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(laws.FAMILY_POINT, "_loaded", {})
    monkeypatch.setattr(registry, "_origins", {})
    yield folder
    for name in [m for m in sys.modules if m.startswith("toyfamily")]:
        del sys.modules[name]


def test_an_edited_family_module_is_refused_until_reinstalled(site):
    points = "[prereg.law_families]\ntoy-burst = toyfamily_edit:build\n"
    fake_distribution(
        site, "toyfamily", {"toyfamily_edit.py": TOY_FAMILY}, {"entry_points.txt": points}
    )
    spec = {"family": "toy-burst", "name": "B"}
    (site / "toyfamily_edit.py").write_text(TOY_FAMILY + "# edited after install\n")
    with pytest.raises(LawError, match=r"differs from the RECORD of toyfamily 1\.0; reinstall it"):
        law_registry().law_from_spec(spec)
    assert registry.origin(registry.LAW_FAMILIES, "toy-burst") is None
    (site / "toyfamily_edit.py").write_text(TOY_FAMILY)
    law = law_registry().law_from_spec(spec)
    assert (law.family, law.n_states, law.stay_probability) == ("toy-burst", 2, 0.9)
    where = laws.family_origin("toy-burst")
    assert where["distribution"] == "toyfamily 1.0"
    assert where["file"] == str(site / "toyfamily_edit.py")


def test_a_family_whose_module_the_record_does_not_list_is_refused(site):
    # What an editable install looks like: the entry point names a module outside the RECORD.
    points = "[prereg.law_families]\ntoy-burst = toyfamily_elsewhere:build\n"
    fake_distribution(site, "toyfamily", {}, {"entry_points.txt": points})
    (site / "toyfamily_elsewhere.py").write_text(TOY_FAMILY)
    with pytest.raises(LawError, match=r"RECORD does not list module .*not pip install -e"):
        law_registry().law_from_spec({"family": "toy-burst", "name": "B"})


def test_a_built_in_family_is_never_taken_from_metadata(site):
    points = f"[prereg.law_families]\n{HIDDEN_MARKOV_ERASURE} = toyfamily_shadow:build\n"
    fake_distribution(
        site, "toyfamily", {"toyfamily_shadow.py": TOY_FAMILY}, {"entry_points.txt": points}
    )
    spec = {
        "family": HIDDEN_MARKOV_ERASURE,
        "name": "E1",
        "n_states": 4,
        "stay_probability": 0.85,
        "erasure_probability": 0.5,
        "target_corruption": 0.48,
    }
    law = law_registry().law_from_spec(spec)
    assert (law.family, law.n_states) == (HIDDEN_MARKOV_ERASURE, 4)
    assert laws.family_origin(HIDDEN_MARKOV_ERASURE) == {
        "built_in": "prereg.rp002a.laws:hidden_markov_erasure_law"
    }
    with pytest.raises(LawError, match="is unknown"):
        LawRegistry().law_from_spec(spec)  # a registry without it: still not from metadata
    with pytest.raises(LawError, match="built in"):
        LawRegistry().register_family(HIDDEN_MARKOV_ERASURE, lambda spec: None)
    assert "toyfamily_shadow" not in sys.modules
    assert registry.origin(registry.LAW_FAMILIES, HIDDEN_MARKOV_ERASURE) is None


def test_an_unknown_family_lists_the_known_ones_and_how_to_add_one(site):
    points = "[prereg.law_families]\ntoy-burst = toyfamily_known:build\n"
    fake_distribution(
        site, "toyfamily", {"toyfamily_known.py": TOY_FAMILY}, {"entry_points.txt": points}
    )
    with pytest.raises(LawError) as refused:
        law_registry().law_from_spec({"family": "no-such-family", "name": "X"})
    message = str(refused.value)
    assert f"known families: ['{HIDDEN_MARKOV_ERASURE}', 'toy-burst']" in message
    assert '[project.entry-points."prereg.law_families"]' in message
    assert "not -e" in message


# -- end to end: a research run uses the installed family ----------------------------------


def _dataset_law(item_dir: Path) -> dict:
    with zipfile.ZipFile(item_dir / "datasets.npz") as archive:
        return json.loads(archive.read("metadata.json"))["law"]


@pytest.mark.slow  # a scratch clone's research run collects the whole repository (~30 s)
def test_a_research_run_uses_the_installed_family(tmp_path):
    dist = _installed_example()
    plan = rp002a_clone.tiny_plan()
    plan["parameters"]["worlds"]["E1"] = dict(STICKY_E1)
    plan["stages"]["target-variance"]["parameters"]["replicates"] = 2
    root = rp002a_clone.scratch_clone(tmp_path, plan)
    project = ScratchProject(root)
    env = {"PYTHONPATH": str(root / "lib")}
    run_id = "target-variance-20261201-001"
    project.run(
        sys.executable, "-m", "prereg.cli", "approve", "--stage", "target-variance",
        "--run-id", run_id, "--plan", rp002a_clone.TINY, "--accept-deviations", check=True, env=env,
    )  # fmt: skip
    project.git("add", "plans/approvals")
    project.git("commit", "-q", "-m", f"Approve {run_id}")
    done = project.run(
        sys.executable, "-m", "pytest", "--research-stage=target-variance",
        "-p", "no:cacheprovider", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    audit = project.run(sys.executable, "-m", "prereg.cli", "audit", f"runs/{run_id}", env=env)
    assert audit.returncode == 0, audit.stdout + audit.stderr

    manifest = project.manifest(run_id)
    assert manifest["status"] == "complete"
    layout = RunLayout.of(project.run_dir(run_id))
    laws_used = {}
    for item in manifest["items"]:
        spec = _dataset_law(layout.item_dir(item["output_dir"]))
        laws_used.setdefault(spec["name"], set()).add(json.dumps(spec, sort_keys=True))
    assert sorted(laws_used) == ["E0", "E1", "E2"]
    (e1,) = (json.loads(s) for s in laws_used["E1"])
    assert e1["family"] == FAMILY and e1["stay_probability"] == 0.875, e1
    assert all(json.loads(s)["family"] == HIDDEN_MARKOV_ERASURE for s in laws_used["E0"])
    env_record = manifest["environment"]
    assert env_record["packages_imported"].get(DISTRIBUTION) == dist.version
    if "extensions" in env_record:  # the controller records where each extension came from
        where = env_record["extensions"][registry.LAW_FAMILIES][FAMILY]
        assert where["distribution"] == f"{DISTRIBUTION} {dist.version}"
        assert where["file"].endswith(MODULE)
