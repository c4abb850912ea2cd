"""prereg's public API for a stage kind, in one import: ``from prereg import api``.

A stage kind is a :class:`StageKind`; this module holds what its parts need, so a kind is a
few lines around the experiment's own code (``examples/prereg-paired-models`` is one)::

    @dataclass(frozen=True)
    class Settings(api.StageSettings):
        replicates: int = api.bounded(minimum=2)
        confidence: float = api.bounded(above=0, below=1)

    KIND = api.StageKind(
        name="my.kind",
        settings=api.settings_parser(Settings),       # errors name stages.<s>.parameters.<field>
        summarise=api.summarise_items("summary.json", "out.json"),
        replay=api.rerun_replay(run_item, cells, rtol=1e-9),
        render=api.render_summary("My comparison", "summary.json"),
    )

Settings and parsing
    :func:`settings_parser`, :func:`parse_as`, :func:`parameters_of`, :func:`field_tree`,
    :func:`bounded`,
    :class:`StageSettings`, :class:`SettingsError` (:mod:`prereg.base.typed_settings`).
Result files
    :func:`save_json`, :func:`load_json`, :func:`json_value`, :func:`save_npz`,
    :func:`load_npz` (:mod:`prereg.kinds.helpers`).
Replay
    :func:`rerun_replay` (reruns the items' own code and the summary, compares every file),
    or, for a replay of one's own, :func:`compare`, :func:`compare_folders`,
    :func:`replay_outputs`, :func:`seed_findings`.
Summary and report
    :func:`collect_items`, :func:`summarise_items`, :func:`render_summary`,
    :func:`headline_from`, and
    :mod:`html` (:mod:`prereg.kinds.report.html`) and :mod:`plots`
    (:mod:`prereg.kinds.report.plots`, matplotlib figures as PNG data URIs; matplotlib is imported
    on use) for a section of one's own.
Seeds
    :func:`derivation`, :func:`seed`, :func:`numpy_generator`, :func:`torch_generator`
    (:mod:`prereg.base.seeds`), :func:`torch_seeded` (torch's global generator, forked).
Stage kinds, items, runs and plans
    :class:`StageKind`, :class:`RunView`, :func:`coordinate_key`, :func:`load_kind`,
    :class:`ItemContext`, :class:`BudgetExceeded`, :class:`SectionContext`,
    :class:`RunFolder`, :class:`RunLayout`, :data:`MEASURED_SUFFIX`, :func:`load_plan`,
    :class:`Plan`,
    :func:`validate_stage`, :class:`InputsRefused` (what a kind's ``check_inputs`` raises),
    and what a project's own software check asks (:func:`stage_module_problem`,
    :func:`baseline_problems`). An experiments module, a pytest module, takes
    ``stage_plan``, ``stage_inputs`` and ``project_root`` from :mod:`prereg.plugin`: this
    module loads no pytest.
Records and formats (what prereg's own protocols, :mod:`prereg.rp002a` and :mod:`prereg.e04`, use)
    canonical JSON and hashes (:func:`write_json`, :func:`read_json`, :func:`canonical_json`,
    :func:`sha256_bytes`, :func:`sha256_file`), the ``.npz`` format :mod:`arrays`, the plan
    schema language (:func:`validate`, :class:`SchemaError`, :data:`PositiveInt`, ...),
    :mod:`registry` (entry points), :class:`PeakScope`, :func:`head_commit`,
    :func:`is_object_id` and
    :func:`user_cache_folder` (a folder of prereg's user cache for caches keyed by content).

Importing this module loads none of prereg's decisions (gate, approval, audit), its pytest
runtime or its commands. ``api.ApprovalError`` still resolves, with a DeprecationWarning,
for kinds written before :class:`InputsRefused`.

docs/API.md, section "prereg.api", lists every name of :data:`__all__`.
"""

from __future__ import annotations

import warnings

from prereg.base import arrays
from prereg.base.gitrepo import head_commit, is_object_id
from prereg.base.hashing import canonical_json, read_json, sha256_bytes, sha256_file, write_json
from prereg.base.provenance import PeakScope
from prereg.base.schema import (
    ANY,
    Finite,
    MapOf,
    NonNegativeFloat,
    NonNegativeInt,
    Nullable,
    OneOf,
    Optional,
    PositiveFloat,
    PositiveInt,
    Probability,
    Range,
    SchemaError,
    UnitInterval,
    validate,
)
from prereg.base.seeds import derivation, numpy_generator, seed, torch_generator
from prereg.base.typed_settings import (
    SettingsError,
    StageSettings,
    bounded,
    field_tree,
    parameters_of,
    parse_as,
    settings_parser,
)
from prereg.base.usercache import folder as user_cache_folder
from prereg.kinds import registry
from prereg.kinds.context import BudgetExceeded, ItemContext
from prereg.kinds.helpers import (
    collect_items,
    compare,
    compare_folders,
    headline_from,
    json_value,
    load_json,
    load_npz,
    render_summary,
    replay_outputs,
    rerun_replay,
    save_json,
    save_npz,
    seed_findings,
    summarise_items,
    torch_seeded,
)
from prereg.kinds.plans import Plan, baseline_problems, load_plan, validate_stage
from prereg.kinds.registry import ExtensionPoint
from prereg.kinds.report import html, plots
from prereg.kinds.report.sections import SectionContext
from prereg.kinds.stages import (
    Grid,
    InputsRefused,
    RunView,
    StageKind,
    coordinate_key,
    load_kind,
    stage_module_problem,
)
from prereg.records.runs import MEASURED_SUFFIX, RunFolder, RunLayout

__all__ = [
    "ANY",
    "MEASURED_SUFFIX",
    "BudgetExceeded",
    "ExtensionPoint",
    "Finite",
    "Grid",
    "InputsRefused",
    "ItemContext",
    "MapOf",
    "NonNegativeFloat",
    "NonNegativeInt",
    "Nullable",
    "OneOf",
    "Optional",
    "PeakScope",
    "Plan",
    "PositiveFloat",
    "PositiveInt",
    "Probability",
    "Range",
    "RunFolder",
    "RunLayout",
    "RunView",
    "SchemaError",
    "SectionContext",
    "SettingsError",
    "StageKind",
    "StageSettings",
    "UnitInterval",
    "arrays",
    "baseline_problems",
    "bounded",
    "canonical_json",
    "collect_items",
    "compare",
    "compare_folders",
    "coordinate_key",
    "derivation",
    "field_tree",
    "head_commit",
    "headline_from",
    "html",
    "is_object_id",
    "json_value",
    "load_json",
    "load_kind",
    "load_npz",
    "load_plan",
    "numpy_generator",
    "parameters_of",
    "parse_as",
    "plots",
    "read_json",
    "registry",
    "render_summary",
    "replay_outputs",
    "rerun_replay",
    "save_json",
    "save_npz",
    "seed",
    "seed_findings",
    "settings_parser",
    "sha256_bytes",
    "sha256_file",
    "stage_module_problem",
    "summarise_items",
    "torch_generator",
    "torch_seeded",
    "user_cache_folder",
    "validate",
    "validate_stage",
    "write_json",
]


def __getattr__(name: str):
    if name == "ApprovalError":  # a kind's check_inputs raises InputsRefused now
        # on use only: the approval module is a decision, above this API
        from prereg.decisions.approval import ApprovalError

        warnings.warn(
            "prereg.api.ApprovalError is deprecated and leaves prereg.api in the next release: "
            "a stage kind's check_inputs raises prereg.api.InputsRefused(message, problems)",
            DeprecationWarning,
            stacklevel=2,
        )
        return ApprovalError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
