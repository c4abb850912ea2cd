"""The shape of the RP002A plan's shared parameters (every RP002A stage kind checks it).

Every number has its range here, checked at load with the file and the field's path in
the error: counts and sizes are integers >= 1, the familywise alpha lies in (0, 1), the
inflations and the margin are finite and > 0. ``decision.familywise_alpha`` is the one
alpha of the decisions: the calibration's intervals, the planning rule of
``confirmatory-config`` and the confirmatory intervals all read it there.
"""

from __future__ import annotations

from prereg.api import (
    ANY,
    Finite,
    MapOf,
    OneOf,
    Optional,
    PositiveFloat,
    PositiveInt,
    Probability,
    Range,
    SchemaError,
    validate,
)
from prereg.rp002a.laws import law_registry
from prereg.rp002a.specs import ModelSpecError, TrainConfig, sizes_from_dict

CONTRAST = {
    "id": str,
    "world": str,
    "minuend": str,
    "subtrahend": str,
    "kind": OneOf(("benefit", "equivalence")),
    "note": str,
}

INFORMATION_SETS = ("current", "window", "history")  # prereg.rp002a.ideal.InformationSet

MODEL = {
    "kind": str,  # "frequency-table" (B0), or a learned kind of prereg.rp002a.models
    "information_set": OneOf(INFORMATION_SETS),
    "sizes": Optional(MapOf(PositiveInt)),  # learned models only; names checked by their kind
    "implementation": Optional(str),  # B2 only: the GRU implementation it is built with
}
FREQUENCY_TABLE = "frequency-table"

TRAINING = {
    "learning_rate": PositiveFloat,
    "adam_beta1": Range(float, min=0, max=1, max_exclusive=True),
    "adam_beta2": Range(float, min=0, max=1, max_exclusive=True),
    "adam_eps": PositiveFloat,
    "batch_size": PositiveInt,
    "grad_clip_norm": PositiveFloat,
    "probability_clip": Probability,
    "max_epochs": PositiveInt,
    "patience": PositiveInt,
    "final_20_window": PositiveInt,
    "final_five_window": PositiveInt,
}

SHARED = {
    "contrast_family": [CONTRAST],
    "decision": {
        "familywise_alpha": Probability,
        "family_size": PositiveInt,
        "primary_inflation": PositiveFloat,
        "report_inflation": PositiveFloat,
        "margin_nats": PositiveFloat,
        "rationale": str,
        "assumptions": str,
        "limitations": str,
    },
    "worlds": MapOf(ANY),  # law specs, built by the law registry below (unknown fields refused)
    "world_order": [str],
    "data": {
        "n_timepoints": PositiveInt,
        "train_episodes": PositiveInt,
        "validation_episodes": PositiveInt,
        "assessment_episodes": PositiveInt,
    },
    "models": MapOf(MODEL),
    "learned_models": [str],
    "training": TRAINING,  # then TrainConfig.from_mapping (the code's own checks)
    "training_notes": MapOf(str),
    "diagnostics": {"confidence_bins": PositiveInt},
    # read by checks/rp002a/pipeline/test_rp002a_plan.py, which recomputes them exactly
    "ideal_figures": MapOf(ANY),
}

IDEAL_FIGURES = {"opportunity_nats": Finite, "window_gap_nats": Finite}


def validate_shared(plan) -> None:
    source = f"{plan.path}: parameters"
    shared = plan.data.get("parameters")
    validate(shared, SHARED, source=str(plan.path), path="parameters")
    family = shared["contrast_family"]
    if len(family) != shared["decision"]["family_size"]:
        raise ValueError(
            f"{source}.decision.family_size is {shared['decision']['family_size']} "
            f"but contrast_family lists {len(family)} contrasts"
        )
    for c in family:
        for side in ("minuend", "subtrahend"):
            if c[side] not in shared["models"]:
                raise ValueError(
                    f"{source}.contrast_family: {c['id']} names unknown model {c[side]!r}"
                )
        if c["world"] not in shared["worlds"]:
            raise ValueError(
                f"{source}.contrast_family: {c['id']} names unknown world {c['world']!r}"
            )
    for key, value in shared["ideal_figures"].items():
        schema = str if key == "averaging" else IDEAL_FIGURES
        validate(value, schema, source=str(plan.path), path=f"parameters.ideal_figures.{key}")
    _validate_models(shared, source)
    registry = law_registry()
    unordered = sorted(set(shared["worlds"]) - set(shared["world_order"]))
    if unordered:
        raise SchemaError(
            f"{source}.worlds: world {unordered[0]} is not in world_order, so no code reads it; "
            "list it in world_order or remove it"
        )
    laws = {}
    for name in shared["world_order"]:
        if name not in shared["worlds"]:
            raise SchemaError(f"{source}.world_order names unknown world {name!r}")
        try:
            laws[name] = registry.law_from_spec(shared["worlds"][name])
        except (ValueError, TypeError) as err:
            raise SchemaError(f"{source}.worlds.{name}: {err}") from None
        if laws[name].name != name:
            raise SchemaError(
                f"{source}.worlds.{name}.name is {laws[name].name!r}; a world's name is its key"
            )
    _models_fit_worlds(shared, laws, source)
    TrainConfig.from_mapping(shared["training"])


def _models_fit_worlds(shared: dict, laws: dict, source: str) -> None:
    """A learned model's alphabet and classes are every world's: otherwise every item fails."""
    for model in shared["learned_models"]:
        sizes = shared["models"][model]["sizes"]
        for world, law in laws.items():
            for field, wanted in (("n_symbols", law.n_symbols), ("n_targets", law.n_states)):
                if sizes[field] != wanted:
                    raise SchemaError(
                        f"{source}.models.{model}.sizes.{field} is {sizes[field]}; world "
                        f"{world} has {wanted} ({'symbols' if field == 'n_symbols' else 'states'})"
                    )


def _validate_models(shared: dict, source: str) -> None:
    """Each model's fields are the ones its kind reads: sizes for a learned model only, an
    implementation for B2 only; sizes by the kind's own names (unknown ones refused)."""
    learned = shared["learned_models"]
    for name in learned:
        if name not in shared["models"]:
            raise SchemaError(f"{source}.learned_models names unknown model {name!r}")
    for name, spec in shared["models"].items():
        where = f"{source}.models.{name}"
        if name not in learned:
            if spec["kind"] != FREQUENCY_TABLE:
                raise SchemaError(
                    f"{where}.kind is {spec['kind']!r}; a model not in learned_models is the "
                    f"{FREQUENCY_TABLE!r} baseline"
                )
            extra = sorted({"sizes", "implementation"} & set(spec))
            if extra:
                raise SchemaError(
                    f"{where}: unknown field {extra[0]} (the {FREQUENCY_TABLE} baseline reads "
                    "no sizes or implementation); remove it"
                )
            continue
        if "sizes" not in spec:
            raise SchemaError(f"{where}: missing field sizes")
        try:
            sizes_from_dict(spec["kind"], spec["sizes"])
        except ModelSpecError as err:
            raise SchemaError(f"{where}: {err}") from None
        wants_implementation = spec["kind"] == "B2"
        if wants_implementation != ("implementation" in spec):
            raise SchemaError(
                f"{where}: "
                + (
                    "missing field implementation"
                    if wants_implementation
                    else f"unknown field implementation ({spec['kind']} has one implementation)"
                )
            )
