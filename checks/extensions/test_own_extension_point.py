"""A user's installed stage kind declares an extension point of its own (``api.ExtensionPoint``)
and loads an entry another installed package declares under it.

The approval binds the entry under the kind's own group, the gate holds the installed package
to that binding, the manifest records it and the audit accepts it; the package's module edited
or reinstalled with other code after approval is refused and flagged; a malformed group name
is refused where it is declared and flagged where a manifest records it. The installed
packages are fake distributions in a temporary site-packages folder (the only one the
registry reads here), so nothing depends on what this environment has installed.
"""

from __future__ import annotations

import shutil
import string
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prereg import api
from prereg.decisions import audit, manifest
from prereg.evidence import execution
from prereg.kinds import registry, stages
from support.distributions import checkout_with_metadata, fake_distribution

pytestmark = pytest.mark.software

GROUP = "acme.variants"
KIND_MODULE = """\
from prereg import api


def plain(x):
    return x


def _is_variant(name, obj):
    return callable(obj)


VARIANTS = api.ExtensionPoint("acme.variants", {"plain": plain}, _is_variant, "variant")


def _settings(plan, stage):
    return VARIANTS.load(plan["stages"][stage]["parameters"]["variant"])


KIND = api.StageKind(name="acme.sweep", settings=_settings)
"""
KIND_POINTS = "[prereg.stage_kinds]\nacme.sweep = acmekinds_kind:KIND\n"
VARIANT_MODULE = "def fancy(x):\n    return 2 * x\n"
VARIANT_POINTS = f"[{GROUP}]\nfancy = acmevariants_mod:fancy\nplain = acmevariants_mod:fancy\n"
PLAN = {"stages": {"sweep": {"kind": "acme.sweep", "parameters": {"variant": "fancy"}}}}


def _install_variants(site: Path, module: str = VARIANT_MODULE) -> None:
    for old in site.glob("acmevariants-*.dist-info"):
        shutil.rmtree(old)
    fake_distribution(
        site, "acmevariants", {"acmevariants_mod.py": module}, {"entry_points.txt": VARIANT_POINTS}
    )


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A temporary site-packages holding the kind's package and the variant's package."""
    folder = (tmp_path / "site-packages").resolve()
    fake_distribution(
        folder, "acmekinds", {"acmekinds_kind.py": KIND_MODULE}, {"entry_points.txt": KIND_POINTS}
    )
    _install_variants(folder)
    monkeypatch.setattr(execution, "site_dirs", lambda: [str(folder)])
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(registry, "_origins", {})
    monkeypatch.setattr(registry, "_points", dict(registry._points))
    monkeypatch.setattr(execution, "_built_in_entries", dict(execution._built_in_entries))
    monkeypatch.setattr(stages.KIND_POINT, "_loaded", {})
    yield folder
    for name in [m for m in sys.modules if m.startswith(("acmekinds", "acmevariants"))]:
        del sys.modules[name]


def _approved() -> dict:
    """Load the kind and parse its stage as ``prereg approve`` does; the bindings it records."""
    kind = stages.load_kind("acme.sweep")
    build = kind.settings(PLAN, "sweep")
    assert build(3) == 6, "the installed variant, not the built-in one, was loaded"
    return registry.loaded_origins()  # what the approval records as its extensions field


def _evidence(recorded: dict, bound: dict) -> SimpleNamespace:
    return SimpleNamespace(
        manifest={"environment": {"extensions": recorded}}, approval={"extensions": bound}
    )


def test_a_kinds_own_extension_point_is_bound_recorded_and_audited_clean(site):
    bound = _approved()
    assert set(bound) == {registry.STAGE_KINDS, GROUP}
    variant = bound[GROUP]["fancy"]
    assert variant["distribution"] == "acmevariants 1.0"
    assert variant["file"] == str(site / "acmevariants_mod.py")
    assert registry.binding_problems(bound) == []  # the gate's condition "extensions"
    point = registry.declared_points()[GROUP]
    assert point.origin("fancy") == variant
    assert point.origin("plain") == {"built_in": "acmekinds_kind:plain"}
    assert point.load("plain")(3) == 3, "a built-in name is never read from metadata"
    assert point.names() == ["fancy", "plain"]
    env = manifest.environment(plugins={}, imported={}, threads={}, execution={})
    assert env["extensions"] == bound
    evidence = _evidence(env["extensions"], bound)
    assert audit.check_extensions(evidence) == []
    assert audit.recorded_extensions(evidence) == bound


def test_the_entry_edited_after_install_is_refused_and_flagged(site):
    bound = _approved()
    (site / "acmevariants_mod.py").write_text(VARIANT_MODULE + "# edited after install\n")
    (problem,) = registry.binding_problems(bound)
    assert f"{GROUP} 'fancy' was approved from acmevariants 1.0" in problem, problem
    point = registry.declared_points()[GROUP]
    # Loaded before the edit and kept for the process: the edit is read by the gate's
    # binding check above, and by a new process below.
    assert point.load("fancy") is point.load("fancy")
    registry._origins.clear()  # a new process: nothing loaded yet
    point._loaded.clear()
    with pytest.raises(
        registry.NotInstalled, match=r"differs from the RECORD of acmevariants 1\.0; reinstall it"
    ):
        point.load("fancy")


def test_other_code_reinstalled_under_the_same_version_is_refused_and_flagged(site):
    bound = _approved()
    _install_variants(site, VARIANT_MODULE + "# patched\n")
    (problem,) = registry.binding_problems(bound)
    assert "acmevariants 1.0 is installed now with other files" in problem, problem
    ran = dict(bound, **{GROUP: {"fancy": registry.current_origin(GROUP, "fancy")}})
    (finding,) = audit.check_extensions(_evidence(ran, bound))
    assert f"environment.extensions.{GROUP}.fancy" in finding, finding
    assert "other extension code than approved" in finding, finding


@pytest.mark.parametrize("group", ["Acme.Variants", "acme", "acme variants", "acme..x", "9a.b"])
def test_a_malformed_group_is_refused_when_declared_and_flagged_when_recorded(site, group):
    with pytest.raises(ValueError, match=f"extension point: group {group!r} is not"):
        api.ExtensionPoint(group, {})
    origin = registry.current_origin(GROUP, "fancy")
    (finding,) = audit.check_extensions(_evidence({group: {"fancy": origin}}, {}))
    assert f"names {group!r}, not an extension-point group" in finding, finding


def test_a_group_is_declared_by_one_owner(site):
    stages.load_kind("acme.sweep")
    with pytest.raises(ValueError, match="'acme.variants' is already declared"):
        api.ExtensionPoint(GROUP, {"other": print})
    with pytest.raises(ValueError, match="'prereg.stage_kinds' is already declared"):
        api.ExtensionPoint(registry.STAGE_KINDS, {})


def test_checkout_metadata_may_not_redirect_a_built_in_entry_of_a_declared_point(site, tmp_path):
    stages.load_kind("acme.sweep")  # declares acme.variants, built in: plain
    honest = f"[{GROUP}]\nplain = acmekinds_kind:plain\n"
    root = checkout_with_metadata(tmp_path / "scratch", "other.egg-info", honest)
    checkout = execution.Checkout.read(root, strict=True)
    assert execution._ignored_problems(checkout, []) == []
    (root / "lib" / "other.egg-info" / "entry_points.txt").write_text(
        f"[{GROUP}]\nplain = prereg.cli:main\n"
    )
    (found,) = execution._ignored_problems(checkout, [])
    assert "redirects the built-in variant 'plain'" in found, found
    assert "acmekinds_kind:plain" in found and "lib/other.egg-info" in found, found


# -- the group-name validator ---------------------------------------------------------------

WORD_START = string.ascii_lowercase
WORD_REST = string.ascii_lowercase + string.digits + "_-"


def _well_formed(text: str) -> bool:
    """The rule, stated without a regular expression: two or more words joined by dots, each
    a lowercase letter then lowercase letters, digits, '_' or '-'."""
    words = text.split(".")
    return (
        len(text) <= registry.GROUP_MAX_LENGTH
        and len(words) >= 2
        and all(w and w[0] in WORD_START and all(c in WORD_REST for c in w) for w in words)
    )


WORD = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(WORD_START),
    st.text(alphabet=WORD_REST, max_size=8),
)


@given(st.lists(WORD, min_size=2, max_size=5))
def test_every_dotted_lowercase_name_is_a_group(words):
    assert registry.group_problem(".".join(words)) is None


@given(st.one_of(st.text(max_size=40), st.text(alphabet=WORD_REST + ".A ", max_size=40)))
def test_the_validator_accepts_exactly_the_well_formed_names(text):
    problem = registry.group_problem(text)
    assert (problem is None) == _well_formed(text), (text, problem)
    if problem is not None:
        assert repr(text)[:20] in problem or "longer than" in problem, problem


@given(st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2)))
def test_a_group_that_is_no_string_is_refused_naming_its_type(value):
    assert "not a str" in registry.group_problem(value)


def test_a_group_longer_than_the_limit_is_refused():
    long = "acme." + "x" * registry.GROUP_MAX_LENGTH
    assert "longer than" in registry.group_problem(long)
    assert registry.group_problem(long[: registry.GROUP_MAX_LENGTH]) is None


def test_prereg_own_groups_are_well_formed_and_declared():
    from prereg.e04.harness import HARNESS_POINT
    from prereg.rp002a.laws import FAMILY_POINT

    assert (HARNESS_POINT.group, FAMILY_POINT.group) == (
        registry.HARNESS_KINDS,
        registry.LAW_FAMILIES,
    )
    for group in (registry.STAGE_KINDS, registry.LAW_FAMILIES, registry.HARNESS_KINDS):
        assert registry.group_problem(group) is None
        assert group in registry.declared_points()
    assert api.ExtensionPoint is registry.ExtensionPoint


def test_an_entry_registered_in_process_loads_and_a_built_in_name_or_wrong_object_is_refused(
    monkeypatch,
):
    monkeypatch.setattr(registry, "_points", dict(registry._points))
    monkeypatch.setattr(execution, "_built_in_entries", dict(execution._built_in_entries))
    point = registry.ExtensionPoint("acme.register_check", {"plain": abs}, _callable, "variant")
    point.register("mine", round)
    assert point.load("mine") is round and point.registered() == ["mine"]
    with pytest.raises(ValueError, match="variant 'plain' is built in"):
        point.register("plain", round)
    with pytest.raises(ValueError, match="is not a valid variant 'other'"):
        point.register("other", 3)
    assert point.load("plain") is abs and point.registered() == ["mine"]


def _callable(name: str, obj: object) -> bool:
    return callable(obj)
