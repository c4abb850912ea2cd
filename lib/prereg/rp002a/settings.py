"""The RP002A plan, parsed once into frozen, typed settings (one class per stage kind).

Each RP002A stage kind parses the plan's shared ``parameters`` block (or, for the
calibration, only its ``decision`` block) and its own stage's ``parameters`` here, with
every check of :mod:`prereg.rp002a.plan_schema` and the kind's consistency rules; a bad
plan raises ``ValueError`` (:class:`prereg.base.schema.SchemaError`) naming the plan file and
the field, and what to do. Item code, summaries, replay and the report then read these
settings, never the raw plan dicts.

A record that copies plan values copies them in the plan's own form: ``record()`` of a
block gives back exactly the plan's mapping (lists stay lists, numbers keep their type),
so summaries and unit records are byte-identical to those written from the raw plan.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from prereg.api import (
    OneOf,
    PositiveFloat,
    PositiveInt,
    Probability,
    Range,
    SchemaError,
    UnitInterval,
    validate,
)
from prereg.rp002a.laws import law_registry
from prereg.rp002a.plan_schema import SHARED, validate_shared
from prereg.rp002a.specs import TrainConfig
from prereg.rp002a.stats.laws import LAW_NAMES

CALIBRATION = "calibration"
TARGET_VARIANCE = "target-variance"
CONFIRMATORY_CONFIG = "confirmatory-config"
CONFIRMATORY = "confirmatory"

SAMPLE_COUNT = Range(int, min=2)  # replicates of a t interval: n - 1 >= 1 degrees of freedom

CALIBRATION_PARAMETERS = {
    "simulation": {
        "n": [SAMPLE_COUNT],
        "laws": [OneOf(LAW_NAMES)],
        "rho": [UnitInterval],
        "within_fraction": [UnitInterval],
        "trials": PositiveInt,
        "decision_sd": PositiveFloat,
        "width_quantiles": [UnitInterval],
    },
    # The Monte Carlo bound's own alpha (simultaneous over the cells), not the decisions'
    # alpha: that one is parameters.decision.familywise_alpha.
    "monte_carlo_bound": {
        "familywise_alpha": Probability,
        "statements": PositiveInt,
        "sided": OneOf(("one-sided upper",)),
        "method": OneOf(("clopper-pearson",)),
    },
    "eligibility": {"minimum_n": SAMPLE_COUNT, "max_coverage_failure_upper": Probability},
    # No rho: benchmark cells have no shared component by construction
    # (prereg.rp002a.stats.calibration_bootstrap), so a rho here would be read by nothing.
    "bootstrap_benchmark": {
        "n": [SAMPLE_COUNT],
        "laws": [OneOf(LAW_NAMES)],
        "within_fraction": [UnitInterval],
        "trials": PositiveInt,
        "draws": PositiveInt,
        "episodes": PositiveInt,
        "caveat": str,
    },
}
VARIANCE_PARAMETERS = {"replicates": SAMPLE_COUNT, "note": str}  # SDs need two replicates
CONFIRMATORY_PARAMETERS = {"note": str, "config": str}
CONFIG_PARAMETERS = {
    "candidate_counts": [SAMPLE_COUNT],  # replicates of a t interval (n - 1 df >= 1)
    "target_half_width_nats": PositiveFloat,
    "output": str,
    "assumption": str,
}
# The planning rule's SD bound has no numbers of its own: its degrees of freedom are the
# target-variance stage's replicates - 1, its alpha and family size are the decisions'
# (parameters.decision), the ones the confirmatory intervals read. One home each.


class _PlanView:
    """What :func:`prereg.rp002a.plan_schema.validate_shared` reads of a plan: data, path."""

    def __init__(self, data: dict, source: str) -> None:
        self.data, self.path = data, source


def plan_source(plan_data: Mapping[str, Any]) -> str:
    """How a refusal names a plan known only by its data (the kind's ``settings``)."""
    return f"plan {plan_data.get('plan_id', '?')}"


def _require_stage(plan_data: dict, stage: str, wanted: str, kind: str, source: str) -> None:
    if stage != wanted:
        raise SchemaError(
            f"{source}: stage {stage!r} has kind {kind!r}, which reads the stage "
            f"named {wanted!r} (and the stages it consumes by name); name the stage {wanted!r}"
        )


def _stage_parameters(plan_data: dict, stage: str, schema: dict, source: str) -> dict:
    stages = plan_data.get("stages")
    if not isinstance(stages, dict) or stage not in stages:
        raise SchemaError(f"{source}: the plan has no stage {stage!r}; add it under stages")
    params = stages[stage].get("parameters")
    validate(params, schema, source=source, path=f"stages.{stage}.parameters")
    return params


# -- the shared block ---------------------------------------------------------------------


@dataclass(frozen=True)
class Contrast:
    """One contrast of the family (``parameters.contrast_family``), in protocol order."""

    id: str
    world: str
    minuend: str
    subtrahend: str
    kind: str  # "benefit" or "equivalence"
    note: str


@dataclass(frozen=True)
class Decision:
    """``parameters.decision``: the one alpha, family size, inflations and margin."""

    familywise_alpha: float
    family_size: int
    primary_inflation: float
    report_inflation: float
    margin_nats: float
    rationale: str
    assumptions: str
    limitations: str

    def record(self) -> dict:
        """The plan's ``decision`` mapping, as written in the plan."""
        return asdict(self)


def parse_decision(plan_data: dict, source: str) -> Decision:
    shared = plan_data.get("parameters")
    decision = shared.get("decision") if isinstance(shared, dict) else None
    validate(decision, SHARED["decision"], source=source, path="parameters.decision")
    return Decision(**decision)


@dataclass(frozen=True)
class DataSizes:
    """``parameters.data``: timepoints per episode and episodes per split."""

    n_timepoints: int
    train_episodes: int
    validation_episodes: int
    assessment_episodes: int


@dataclass(frozen=True)
class ModelSpec:
    """One entry of ``parameters.models``: B0 (frequency table) or a learned model."""

    name: str
    kind: str
    information_set: str
    sizes: Mapping[str, int] | None  # learned models only
    implementation: str | None  # B2 only

    def record(self) -> dict:
        """The plan's model mapping, as written in the plan (absent fields stay absent)."""
        out: dict[str, Any] = {"kind": self.kind, "information_set": self.information_set}
        if self.sizes is not None:
            out["sizes"] = dict(self.sizes)
        if self.implementation is not None:
            out["implementation"] = self.implementation
        return out


@dataclass(frozen=True)
class SharedSettings:
    """The plan's shared ``parameters`` block (target-variance, config and confirmatory)."""

    contrast_family: tuple[Contrast, ...]
    decision: Decision
    laws: Mapping[str, Any]  # world name -> prereg.rp002a.laws.HiddenMarkovLaw
    world_order: tuple[str, ...]
    data: DataSizes
    models: Mapping[str, ModelSpec]
    learned_models: tuple[str, ...]
    training: TrainConfig
    probability_clip: float  # parameters.training.probability_clip, as written
    flag_definitions: str  # parameters.training_notes.flags
    confidence_bins: int

    def world_contrasts(self, world: str) -> list[Contrast]:
        return [c for c in self.contrast_family if c.world == world]


def parse_shared(plan_data: dict, source: str) -> SharedSettings:
    """Every check of :func:`validate_shared`, then the parsed block."""
    validate_shared(_PlanView(plan_data, source))
    shared = plan_data["parameters"]
    notes = shared["training_notes"]
    if "flags" not in notes:
        raise SchemaError(
            f"{source}: missing field parameters.training_notes.flags (the training flags' "
            "definitions, which the target-variance summary records); add it"
        )
    registry = law_registry()
    models = {
        name: ModelSpec(
            name=name,
            kind=spec["kind"],
            information_set=spec["information_set"],
            sizes=dict(spec["sizes"]) if "sizes" in spec else None,
            implementation=spec.get("implementation"),
        )
        for name, spec in shared["models"].items()
    }
    return SharedSettings(
        contrast_family=tuple(Contrast(**c) for c in shared["contrast_family"]),
        decision=Decision(**shared["decision"]),
        laws={w: registry.law_from_spec(shared["worlds"][w]) for w in shared["world_order"]},
        world_order=tuple(shared["world_order"]),
        data=DataSizes(**shared["data"]),
        models=models,
        learned_models=tuple(shared["learned_models"]),
        training=TrainConfig.from_mapping(shared["training"]),
        probability_clip=shared["training"]["probability_clip"],
        flag_definitions=notes["flags"],
        confidence_bins=shared["diagnostics"]["confidence_bins"],
    )


# -- calibration --------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulationGrid:
    """``stages.calibration.parameters.simulation``."""

    n: tuple[int, ...]
    laws: tuple[str, ...]
    rho: tuple[float, ...]
    within_fraction: tuple[float, ...]
    trials: int
    decision_sd: float
    width_quantiles: tuple[float, ...]


@dataclass(frozen=True)
class MonteCarloBound:
    """``stages.calibration.parameters.monte_carlo_bound`` (the bound's own alpha)."""

    familywise_alpha: float
    statements: int
    sided: str
    method: str

    @property
    def level(self) -> float:
        """The per-cell level of the simultaneous bound."""
        return self.familywise_alpha / self.statements

    def record(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Eligibility:
    """``stages.calibration.parameters.eligibility``: the protocol's eligibility rule."""

    minimum_n: int
    max_coverage_failure_upper: float

    def record(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BootstrapBenchmark:
    """``stages.calibration.parameters.bootstrap_benchmark`` (no rho: no shared component)."""

    n: tuple[int, ...]
    laws: tuple[str, ...]
    within_fraction: tuple[float, ...]
    trials: int
    draws: int
    episodes: int
    caveat: str


@dataclass(frozen=True)
class CalibrationPlan:
    """The calibration stage: its grid, bound, eligibility rule, benchmark, the decisions."""

    plan_id: str
    decision: Decision
    simulation: SimulationGrid
    bound: MonteCarloBound
    eligibility: Eligibility
    bootstrap: BootstrapBenchmark


def parse_calibration(plan_data: dict, stage: str, *, source: str | None = None) -> CalibrationPlan:
    source = source or plan_source(plan_data)
    _require_stage(plan_data, stage, CALIBRATION, "rp002a.calibration", source)
    params = _stage_parameters(plan_data, stage, CALIBRATION_PARAMETERS, source)
    # The calibration reads only the decision block of the shared parameters (a reduced
    # plan may hold only that); its ranges are the shared schema's.
    decision = parse_decision(plan_data, source)
    sim, bench = params["simulation"], params["bootstrap_benchmark"]
    simulation = SimulationGrid(
        n=tuple(sim["n"]),
        laws=tuple(sim["laws"]),
        rho=tuple(sim["rho"]),
        within_fraction=tuple(sim["within_fraction"]),
        trials=sim["trials"],
        decision_sd=sim["decision_sd"],
        width_quantiles=tuple(sim["width_quantiles"]),
    )
    settings = CalibrationPlan(
        plan_id=plan_data["plan_id"],
        decision=decision,
        simulation=simulation,
        bound=MonteCarloBound(**params["monte_carlo_bound"]),
        eligibility=Eligibility(**params["eligibility"]),
        bootstrap=BootstrapBenchmark(
            n=tuple(bench["n"]),
            laws=tuple(bench["laws"]),
            within_fraction=tuple(bench["within_fraction"]),
            trials=bench["trials"],
            draws=bench["draws"],
            episodes=bench["episodes"],
            caveat=bench["caveat"],
        ),
    )
    cells = len(simulation.n) * len(simulation.laws) * len(simulation.rho)
    cells *= len(simulation.within_fraction)
    if settings.bound.statements != cells:
        raise ValueError(
            f"{source}: stages.{stage}.parameters.monte_carlo_bound.statements is "
            f"{settings.bound.statements}, but the grid has {cells} simulation cells: the "
            "simultaneous bound must cover every cell"
        )
    return settings


# -- target-variance and confirmatory -----------------------------------------------------


@dataclass(frozen=True)
class VariancePlan:
    """The target-variance stage: the shared block and the replicates per world."""

    plan_id: str
    shared: SharedSettings
    replicates: int
    note: str


def parse_variance(plan_data: dict, stage: str, *, source: str | None = None) -> VariancePlan:
    source = source or plan_source(plan_data)
    shared = parse_shared(plan_data, source)
    params = _stage_parameters(plan_data, stage, VARIANCE_PARAMETERS, source)
    return VariancePlan(
        plan_id=plan_data["plan_id"],
        shared=shared,
        replicates=params["replicates"],
        note=params["note"],
    )


@dataclass(frozen=True)
class ConfirmatoryPlan:
    """The confirmatory stage: the shared block and the frozen configuration's path."""

    plan_id: str
    shared: SharedSettings
    config: str  # repository-relative path of the committed frozen configuration
    note: str


def parse_confirmatory(
    plan_data: dict, stage: str, *, source: str | None = None
) -> ConfirmatoryPlan:
    source = source or plan_source(plan_data)
    _require_stage(plan_data, stage, CONFIRMATORY, "rp002a.confirmatory", source)
    shared = parse_shared(plan_data, source)
    params = _stage_parameters(plan_data, stage, CONFIRMATORY_PARAMETERS, source)
    namespaces: dict[str, str] = {}
    for name, spec in plan_data["stages"].items():
        ns = spec.get("seed_namespace")
        if ns is not None and ns in namespaces:
            raise ValueError(
                f"{source}: stages {namespaces[ns]} and {name} share the seed namespace "
                f"{ns!r}; confirmation needs a fresh namespace never used before"
            )
        if ns is not None:
            namespaces[ns] = name
    return ConfirmatoryPlan(
        plan_id=plan_data["plan_id"], shared=shared, config=params["config"], note=params["note"]
    )


# -- confirmatory-config ------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigPlan:
    """The confirmatory-config stage: the fixed rule's parameters and their homes."""

    plan_id: str
    decision: Decision
    candidate_counts: tuple[int, ...]
    target_half_width_nats: float
    output: str  # file name under plans/
    assumption: str
    variance_replicates: int  # stages.target-variance.parameters.replicates (df + 1)

    def record(self) -> dict:
        """The stage's ``parameters`` mapping, as written in the plan."""
        return {
            "candidate_counts": list(self.candidate_counts),
            "target_half_width_nats": self.target_half_width_nats,
            "output": self.output,
            "assumption": self.assumption,
        }

    def sd_bound(self) -> dict:
        """The planning rule's SD-bound settings, each read from its one home in the plan."""
        return {
            "df": self.variance_replicates - 1,
            "familywise_alpha": self.decision.familywise_alpha,
            "family_size": self.decision.family_size,
        }


def parse_config(plan_data: dict, stage: str, *, source: str | None = None) -> ConfigPlan:
    source = source or plan_source(plan_data)
    _require_stage(plan_data, stage, CONFIRMATORY_CONFIG, "rp002a.confirmatory-config", source)
    shared = parse_shared(plan_data, source)
    params = _stage_parameters(plan_data, stage, CONFIG_PARAMETERS, source)
    if not params["candidate_counts"]:
        raise SchemaError(
            f"{source}: field stages.{stage}.parameters.candidate_counts is empty; "
            "list at least one count"
        )
    stages = plan_data["stages"]
    if TARGET_VARIANCE not in stages:
        raise SchemaError(
            f"{source}: the {CONFIRMATORY_CONFIG} stage reads the replicates of a "
            f"{TARGET_VARIANCE} stage in the same plan, and there is none"
        )
    replicates = (stages[TARGET_VARIANCE].get("parameters") or {}).get("replicates")
    if not isinstance(replicates, int) or isinstance(replicates, bool) or replicates < 2:
        raise SchemaError(
            f"{source}: field stages.{TARGET_VARIANCE}.parameters.replicates is "
            f"{replicates!r}; the planning rule needs an integer >= 2 (df = replicates - 1)"
        )
    if CALIBRATION in stages:
        grid = stages[CALIBRATION]["parameters"]["simulation"]["n"]
        missing = [n for n in params["candidate_counts"] if n not in grid]
        if missing:
            raise SchemaError(
                f"{source}: field stages.{stage}.parameters.candidate_counts lists {missing}, "
                f"which the calibration grid (stages.{CALIBRATION}.parameters."
                f"simulation.n = {grid}) does not calibrate; the rule would fail after the run"
            )
    return ConfigPlan(
        plan_id=plan_data["plan_id"],
        decision=shared.decision,
        candidate_counts=tuple(params["candidate_counts"]),
        target_half_width_nats=params["target_half_width_nats"],
        output=params["output"],
        assumption=params["assumption"],
        variance_replicates=replicates,
    )


# -- the kinds' glue ----------------------------------------------------------------------


def renderer(target: str):
    """A report section renderer imported on first use (``module:function``)."""

    def render(context) -> str:
        module, _, function = target.partition(":")
        return getattr(importlib.import_module(module), function)(context)

    render.__qualname__ = render.__name__ = f"render[{target}]"
    return render
