"""The shape of the RP002A plan's shared parameters (every RP002A stage kind checks it)."""

from __future__ import annotations

from prereg.schema import ANY, MapOf, OneOf, validate

CONTRAST = {
    "id": str,
    "world": str,
    "minuend": str,
    "subtrahend": str,
    "kind": OneOf(("benefit", "equivalence")),
    "note": str,
}

SHARED = {
    "contrast_family": [CONTRAST],
    "decision": {
        "familywise_alpha": float,
        "family_size": int,
        "primary_inflation": float,
        "report_inflation": float,
        "margin_nats": float,
        "rationale": str,
        "assumptions": str,
        "limitations": str,
    },
    "worlds": MapOf(ANY),  # law specs, validated by the law registry when built
    "world_order": [str],
    "data": {
        "n_timepoints": int,
        "train_episodes": int,
        "validation_episodes": int,
        "assessment_episodes": int,
    },
    "models": MapOf(ANY),  # sizes validated by prereg.rp002a.models when built
    "learned_models": [str],
    "training": MapOf(float),  # validated by TrainConfig.from_mapping (names every key)
    "training_notes": MapOf(str),
    "diagnostics": {"confidence_bins": int},
    "ideal_figures": ANY,
}


def validate_shared(plan) -> None:
    source = f"{plan.path}: parameters"
    shared = plan.data.get("parameters")
    validate(shared, SHARED, source=source)
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
    from prereg.rp002a.laws import law_registry
    from prereg.rp002a.training import TrainConfig

    registry = law_registry()
    for name in shared["world_order"]:
        registry.law_from_spec(shared["worlds"][name])
    TrainConfig.from_mapping(shared["training"])
