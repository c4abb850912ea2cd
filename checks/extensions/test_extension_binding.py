"""An approval binds the installed packages its stage's code comes from.

The attack: approve a run of a stage whose kind (or law family, harness kind) lives in an
installed package, then reinstall that package at another version, or with other code, and
run under the same approval. The code that would run is not the code approved, so the gate
refuses (condition ``extensions``) and the audit compares the run's record with the
approval's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from prereg.decisions import gate
from prereg.evidence import envlock
from prereg.kinds import registry
from support.distributions import fake_distribution

pytestmark = pytest.mark.software

MODULE = "from prereg.kinds.stages import StageKind\nKIND = StageKind(name='toy.bound')\n"
POINTS = "[prereg.stage_kinds]\ntoy.bound = toybound_mod:KIND\n"


def _install(site: Path, version: str, module: str) -> None:
    """A distribution of ``toybound`` at ``version`` in ``site`` (replacing any other)."""
    for old in site.glob("toybound-*.dist-info"):
        shutil.rmtree(old)
    fake_distribution(
        site, "toybound", {"toybound_mod.py": module}, {"entry_points.txt": POINTS}, version
    )


def test_an_unchanged_installation_matches_its_binding(site):
    _install(site, "1.0", MODULE)
    bound = {
        registry.STAGE_KINDS: {
            "toy.bound": registry.current_origin(registry.STAGE_KINDS, "toy.bound")
        }
    }
    assert bound[registry.STAGE_KINDS]["toy.bound"]["distribution"] == "toybound 1.0"
    assert registry.binding_problems(bound) == []


@pytest.mark.parametrize(
    "version, module, phrase",
    [
        ("2.0", MODULE, "now comes from toybound 2.0"),  # another release
        # same version, other code: the approval's environment lock names the file
        (
            "1.0",
            MODULE + "# patched\n",
            "toybound 1.0 is installed now with other files: toybound_mod",
        ),
        (None, None, "is not installed now"),  # uninstalled
    ],
    ids=["new-version", "same-version-other-code", "uninstalled"],
)
def test_a_reinstalled_or_removed_package_is_refused_by_the_gate(site, version, module, phrase):
    _install(site, "1.0", MODULE)
    bound = {
        registry.STAGE_KINDS: {
            "toy.bound": registry.current_origin(registry.STAGE_KINDS, "toy.bound")
        }
    }
    lock = envlock.lock()
    if version is None:
        for path in site.iterdir():
            if path.is_dir():
                for inner in path.iterdir():
                    inner.unlink()
                path.rmdir()
            else:
                path.unlink()
    else:
        _install(site, version, module)
    problems = registry.binding_problems(bound, lock)
    assert len(problems) == 1 and phrase in problems[0] and "toy.bound" in problems[0], problems
    assert "approved from toybound 1.0" in problems[0], problems
    facts = gate.Facts(
        stage="toy",
        record=None,  # the condition reads the gathered problems only
        record_rel="plans/approvals/x.json",
        extension_problems=tuple(problems),
    )
    refusals = gate.extensions(facts)
    assert [r.condition for r in refusals] == ["extensions"], refusals
    assert gate.extensions in gate.RUN_CONDITIONS


def _audit_of(tmp_path, approval: dict, manifest_extensions: dict | None):
    from prereg.decisions.audit import Evidence, check_extensions

    env = {} if manifest_extensions is None else {"extensions": manifest_extensions}
    evidence = Evidence(
        root=tmp_path,
        run_dir=tmp_path / "runs" / "toy-20261201-001",
        approval=approval,
        manifest={"environment": env},
    )
    return check_extensions(evidence)


def test_the_audit_compares_the_runs_extensions_with_the_approvals(tmp_path, site):
    _install(site, "1.0", MODULE)
    origin = registry.current_origin(registry.STAGE_KINDS, "toy.bound")
    bound = {registry.STAGE_KINDS: {"toy.bound": origin}}
    assert _audit_of(tmp_path, {"extensions": bound}, bound) == []
    other = {registry.STAGE_KINDS: {"toy.bound": dict(origin, record_sha256="0" * 64)}}
    (finding,) = _audit_of(tmp_path, {"extensions": bound}, other)
    assert "other extension code than approved" in finding, finding
    (finding,) = _audit_of(tmp_path, {"extensions": bound}, None)
    assert "environment.extensions is missing" in finding, finding
    assert _audit_of(tmp_path, {}, None) == [], "a run of built-in code only records none"


def test_two_distributions_providing_one_name_are_refused(site, monkeypatch):
    """A second package declaring the same kind name would make site-packages order decide
    which code runs: neither is loaded, and an approval of either is refused."""
    _install(site, "1.0", MODULE)
    bound = {
        registry.STAGE_KINDS: {
            "toy.bound": registry.current_origin(registry.STAGE_KINDS, "toy.bound")
        }
    }
    fake_distribution(site, "toytwin", {"toybound_mod.py": MODULE}, {"entry_points.txt": POINTS})
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(registry.NotInstalled, match="provided by 2 installed distributions"):
        registry.load_installed(registry.STAGE_KINDS, "toy.bound", lambda kind: True)
    assert registry.current_origin(registry.STAGE_KINDS, "toy.bound") is None
    (problem,) = registry.binding_problems(bound)
    assert "toybound 1.0" in problem and "toytwin 1.0" in problem, problem
    assert "uninstall all but one" in problem, problem
