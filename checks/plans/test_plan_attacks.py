"""Plans and records say one finite thing, in range, and every field is read.

Each attack is made for real twice: on the file at load (``load_plan`` and the stage
kind's ``validate_stage``, or ``load_approval``) and through ``prereg approve`` in a toy
git repository, which must refuse with exit 2 naming the field and write no approval.
Hypothesis properties cover the strict JSON reader and the range validator.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prereg.base.hashing import canonical_json, parse_json, read_json
from prereg.base.schema import Range, SchemaError, validate
from prereg.decisions.approval import load_approval
from prereg.kinds.plans import load_plan, validate_stage
from support.toy import PINS, make_toy_repo, stage_spec

pytestmark = [pytest.mark.software, pytest.mark.attack]

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "plans" / "demo" / "STATISTICAL_PIPELINE_PLAN.json"
E04 = REPO / "plans" / "demo" / "E04_PLAN.json"
RUN = "toy-20261130-001"
REFUSED = 2  # prereg approve
GATE_REFUSED = 4  # pytest --research-stage (usage error)

# -- the strict JSON reader ---------------------------------------------------------------


def _read_text(tmp_path: Path, text: str, name: str = "file.json"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return read_json(path, what="plan")


@pytest.mark.parametrize(
    "text, named",
    [
        ('{"a": 1, "a": 2}', "key 'a' appears twice"),
        ('{"outer": {"k": [1, {"x": 1, "x": 1}]}}', "key 'x' appears twice"),
        ('{"budget_seconds": NaN}', "constant NaN"),
        ('{"budget_seconds": Infinity}', "constant Infinity"),
        ('{"a": [1, -Infinity]}', "constant -Infinity"),
        ('{"budget_seconds": 1e999}', "1e999 overflows"),
        ('{"a": -1e400}', "-1e400 overflows"),
    ],
)
def test_read_json_refuses_duplicate_keys_and_non_finite_numbers(tmp_path, text, named):
    with pytest.raises(ValueError) as err:
        _read_text(tmp_path, text)
    message = str(err.value)
    assert "file.json" in message and named in message and "line 1" in message, message


def test_read_json_names_both_lines_of_a_duplicate_key(tmp_path):
    text = '{\n  "stage": "toy",\n  "other": 1,\n  "stage": "calibration"\n}\n'
    with pytest.raises(ValueError, match=r"lines 2, 4\): key 'stage' appears twice"):
        _read_text(tmp_path, text)


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"a": NaN}', "[1e999]"])
def test_parse_json_refuses_what_read_json_refuses_naming_the_source(text):
    """Text that never was a file (a blob from git show) is parsed as strictly."""
    with pytest.raises(ValueError, match=r"^plan plans/P\.json at 0123abc is refused \(line 1\)"):
        parse_json(text.encode(), what="plan", source="plans/P.json at 0123abc")


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON_VALUES)
def test_property_every_finite_document_reads_back_equal(tmp_path, value):
    assert _read_text(tmp_path, canonical_json(value)) == value


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    document=st.dictionaries(st.text(max_size=6), JSON_VALUES, min_size=1, max_size=5),
    data=st.data(),
)
def test_property_a_repeated_key_is_refused_naming_it(tmp_path, document, data):
    pairs = list(document.items())
    key = data.draw(st.sampled_from(sorted(document)))
    pairs = [*pairs, (key, data.draw(JSON_VALUES))]
    text = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"
    wrapped = data.draw(st.sampled_from(["{}", '{{"outer": {}}}', "[1, {}]"])).format(text)
    with pytest.raises(ValueError, match=re.escape(f"key {key!r} appears twice")):
        _read_text(tmp_path, wrapped)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=JSON_VALUES,
    constant=st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-2E+400"]),
    data=st.data(),
)
def test_property_a_non_finite_number_anywhere_is_refused(tmp_path, value, constant, data):
    marker = "__NON_FINITE__"
    place = data.draw(st.sampled_from(["list", "object", "nested"]))
    if place == "list":
        doc = [value, marker]
    elif place == "object":
        doc = {"value": value, "number": marker}
    else:
        doc = {"a": [{"b": marker}], "c": value}
    text = json.dumps(doc).replace(json.dumps(marker), constant)
    with pytest.raises(ValueError, match=re.escape(constant.lstrip("-"))):
        _read_text(tmp_path, text)


# -- the range validator ------------------------------------------------------------------

BOUNDS = st.one_of(st.none(), st.integers(-100, 100))


@st.composite
def ranges(draw):
    kind = draw(st.sampled_from([int, float]))
    low, high = draw(BOUNDS), draw(BOUNDS)
    if low is not None and high is not None and low > high:
        low, high = high, low
    return Range(
        kind,
        min=low,
        max=high,
        min_exclusive=draw(st.booleans()),
        max_exclusive=draw(st.booleans()),
    )


NUMBERS = (
    st.integers(-200, 200)
    | st.floats(-200, 200)
    | st.sampled_from([math.nan, math.inf, -math.inf, True, False, "1", None])
)


def _inside(r: Range, value) -> bool:
    """The range's meaning, stated independently of Range.contains."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if r.type is int and not isinstance(value, int):
        return False
    if not math.isfinite(value):
        return False
    if r.min is not None and not (value > r.min if r.min_exclusive else value >= r.min):
        return False
    return r.max is None or (value < r.max if r.max_exclusive else value <= r.max)


@settings(max_examples=400)
@given(
    r=ranges(),
    value=NUMBERS,
    path=st.lists(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), min_size=1, max_size=3),
)
def test_property_a_value_passes_exactly_when_in_range_and_a_refusal_names_the_field(
    r, value, path
):
    schema, document = r, value
    for key in reversed(path):
        schema, document = {key: schema}, {key: document}
    if _inside(r, value):
        validate(document, schema, source="plans/P.json")
        return
    with pytest.raises(SchemaError) as err:
        validate(document, schema, source="plans/P.json")
    message = str(err.value)
    assert message.startswith(f"plans/P.json: field {'.'.join(path)} must be {r.describe()}")


@settings(max_examples=100)
@given(value=st.sampled_from([math.nan, math.inf, -math.inf]), path=st.sampled_from(["a", "b"]))
def test_property_a_plain_float_field_is_finite(value, path):
    with pytest.raises(SchemaError, match=f"field {path} must be a finite number"):
        validate({path: value}, {path: float}, source="x.json")


# -- attacks on the plans: refused at load ------------------------------------------------


def _set(doc: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        doc = doc[key]
    doc[last] = value


# (plan file, stage, dotted path, value, the field the refusal names)
PIPELINE_ATTACKS = [
    ("budget-zero", "stages.calibration.budget_seconds", 0, "stages.calibration.budget_seconds"),
    ("budget-negative", "stages.confirmatory.budget_seconds", -60, "stages.confirmatory.budget_seconds"),
    ("threads-zero", "stages.target-variance.threads_per_worker", 0, "stages.target-variance.threads_per_worker"),
    ("threads-negative", "stages.calibration.threads_per_worker", -2, "stages.calibration.threads_per_worker"),
    ("threads-fraction", "stages.calibration.threads_per_worker", 1.5, "stages.calibration.threads_per_worker"),
    ("cpu-threads-zero", "environment_pins.cpu_threads", 0, "environment_pins.cpu_threads"),
    ("replicates-zero", "stages.target-variance.parameters.replicates", 0, "replicates"),
    ("replicates-one", "stages.target-variance.parameters.replicates", 1, "replicates"),
    ("trials-zero", "stages.calibration.parameters.simulation.trials", 0, "simulation.trials"),
    ("trials-negative", "stages.calibration.parameters.bootstrap_benchmark.trials", -3, "bootstrap_benchmark.trials"),
    ("draws-zero", "stages.calibration.parameters.bootstrap_benchmark.draws", 0, "bootstrap_benchmark.draws"),
    ("episodes-zero", "stages.calibration.parameters.bootstrap_benchmark.episodes", 0, "bootstrap_benchmark.episodes"),
    ("sample-count-one", "stages.calibration.parameters.simulation.n", [1, 5], "simulation.n[0]"),
    ("statements-zero", "stages.calibration.parameters.monte_carlo_bound.statements", 0, "monte_carlo_bound.statements"),
    ("candidate-count-zero", "stages.confirmatory-config.parameters.candidate_counts", [0, 5], "candidate_counts[0]"),
    ("candidate-not-calibrated", "stages.confirmatory-config.parameters.candidate_counts", [5, 7], "candidate_counts lists [7]"),
    ("half-width-zero", "stages.confirmatory-config.parameters.target_half_width_nats", 0, "target_half_width_nats"),
    ("batch-size-zero", "parameters.training.batch_size", 0, "training.batch_size"),
    ("max-epochs-negative", "parameters.training.max_epochs", -1, "training.max_epochs"),
    ("learning-rate-zero", "parameters.training.learning_rate", 0.0, "training.learning_rate"),
    ("episodes-shared-zero", "parameters.data.train_episodes", 0, "data.train_episodes"),
    ("timepoints-negative", "parameters.data.n_timepoints", -33, "data.n_timepoints"),
    ("model-size-zero", "parameters.models.B1.sizes.hidden_channels", 0, "models.B1.sizes.hidden_channels"),
    ("bins-zero", "parameters.diagnostics.confidence_bins", 0, "diagnostics.confidence_bins"),
    ("alpha-zero", "parameters.decision.familywise_alpha", 0, "decision.familywise_alpha"),
    ("alpha-one", "parameters.decision.familywise_alpha", 1, "decision.familywise_alpha"),
    ("alpha-big", "parameters.decision.familywise_alpha", 5.0, "decision.familywise_alpha"),
    ("mc-alpha-zero", "stages.calibration.parameters.monte_carlo_bound.familywise_alpha", 0.0, "monte_carlo_bound.familywise_alpha"),
    ("eligibility-one", "stages.calibration.parameters.eligibility.max_coverage_failure_upper", 1.0, "max_coverage_failure_upper"),
    ("fraction-above-one", "stages.calibration.parameters.simulation.rho", [0.0, 1.5], "simulation.rho[1]"),
    ("margin-negative", "parameters.decision.margin_nats", -0.01, "decision.margin_nats"),
    ("inflation-zero", "parameters.decision.primary_inflation", 0, "decision.primary_inflation"),
    # a field no code reads, and a second home of a number
    ("unread-rho", "stages.calibration.parameters.bootstrap_benchmark.rho", 0.0, "unknown field stages.calibration.parameters.bootstrap_benchmark.rho"),
    ("second-alpha-sd-bound", "stages.confirmatory-config.parameters.sd_bound", {"df": 2, "familywise_alpha": 0.05, "family_size": 7}, "unknown field stages.confirmatory-config.parameters.sd_bound"),
    ("second-alpha-confirmatory", "stages.confirmatory.parameters.familywise_alpha", 0.05, "unknown field stages.confirmatory.parameters.familywise_alpha"),
    ("unread-baseline-sizes", "parameters.models.B0.sizes", {"hidden": 4}, "unknown field sizes"),
    ("world-renamed", "parameters.worlds.E1.name", "E2", "parameters.worlds.E1.name"),
    ("classes-mismatch", "parameters.models.B1.sizes.n_targets", 3, "parameters.models.B1.sizes.n_targets"),
    ("alphabet-mismatch", "parameters.models.B2.sizes.n_symbols", 6, "parameters.models.B2.sizes.n_symbols"),
    ("unread-world", "parameters.worlds.E9", {"family": "hidden-markov-erasure"}, "world E9 is not in world_order"),
]  # fmt: skip

E04_ATTACKS = [
    ("task-count-zero", "stages.e04.parameters.tasks.count", 0, "tasks.count"),
    ("encode-batch-zero", "stages.e04.parameters.embedding.encode_batch_size", 0, "embedding.encode_batch_size"),
    ("ndcg-k-negative", "stages.e04.parameters.metrics.ndcg_k", -10, "metrics.ndcg_k"),
    ("recall-k-zero", "stages.e04.parameters.metrics.recall_ks", [0, 5], "metrics.recall_ks[0]"),
    ("dose-files-zero", "stages.e04.parameters.doses", [{"seed_coordinate": 0, "files": 0}], "doses[0].files"),
    ("dimension-zero", "stages.e04.parameters.embedding.identity.dimension", 0, "identity.dimension"),
    ("timeout-zero", "stages.e04.parameters.cache.busy_timeout_seconds", 0, "cache.busy_timeout_seconds"),
    ("atol-negative", "stages.e04.parameters.cache.conflict_atol", -1e-5, "cache.conflict_atol"),
    ("batch-size-zero", "stages.e04.parameters.harnesses.H008.embedding_batch_size", 0, "embedding_batch_size"),
    ("budget-zero", "stages.e04.budget_seconds", 0, "stages.e04.budget_seconds"),
    ("unread-field", "stages.e04.parameters.metrics.mrr_k", 10, "stages.e04.parameters: unknown field metrics.mrr_k"),
]  # fmt: skip


def _refusal_at_load(path: Path) -> str:
    """The message of the first refusal of loading and validating every stage of ``path``."""
    try:
        plan = load_plan(path)
        for stage in plan.stages:
            validate_stage(plan, stage)
    except (ValueError, LookupError) as err:
        return str(err)
    raise AssertionError(f"{path} loaded and validated: the attack was not refused")


@pytest.mark.parametrize(
    "source, attack",
    [(PIPELINE, a) for a in PIPELINE_ATTACKS] + [(E04, a) for a in E04_ATTACKS],
    ids=lambda v: v[0] if isinstance(v, tuple) else v.parent.name + "/" + v.stem,
)
def test_an_out_of_range_unread_or_duplicated_number_is_refused_at_load(tmp_path, source, attack):
    _, dotted, value, named = attack
    plan = json.loads(source.read_text())
    _set(plan, dotted, copy.deepcopy(value))
    path = tmp_path / source.name
    path.write_text(json.dumps(plan, indent=2))
    message = _refusal_at_load(path)
    assert str(path) in message and named in message, message


TEXT_ATTACKS = [
    # (name, (old, new) text substitution in the demo pipeline plan, what the refusal names)
    ("duplicate-key", ('"budget_seconds": 900,', '"budget_seconds": 900, "budget_seconds": 1,'), "key 'budget_seconds' appears twice"),
    ("nan-budget", ('"budget_seconds": 900,', '"budget_seconds": NaN,'), "constant NaN"),
    ("infinite-budget", ('"budget_seconds": 900,', '"budget_seconds": Infinity,'), "constant Infinity"),
    ("overflowing-budget", ('"budget_seconds": 900,', '"budget_seconds": 1e999,'), "1e999 overflows"),
    ("nan-threads", ('"threads_per_worker": 1,', '"threads_per_worker": NaN,'), "constant NaN"),
    ("nan-count", ('"replicates": 3,', '"replicates": NaN,'), "constant NaN"),
    ("nan-alpha", ('"familywise_alpha": 0.05,', '"familywise_alpha": NaN,'), "constant NaN"),
]  # fmt: skip


@pytest.mark.parametrize("attack", TEXT_ATTACKS, ids=lambda a: a[0])
def test_a_duplicate_key_or_non_finite_constant_in_a_plan_is_refused_at_load(tmp_path, attack):
    _, (old, new), named = attack
    text = PIPELINE.read_text()
    assert old in text
    path = tmp_path / "PLAN.json"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ValueError) as err:
        load_plan(path)
    assert str(path) in str(err.value) and named in str(err.value), str(err.value)


def test_the_shipped_plans_validate_and_hold_one_alpha_for_the_decisions():
    for path in [PIPELINE, REPO / "plans" / "STATISTICAL_PIPELINE_PLAN.json"]:
        plan = load_plan(path)
        for stage in plan.stages:
            validate_stage(plan, stage)
        text = path.read_text()
        # the decisions' alpha once, the calibration's Monte Carlo bound alpha once
        assert text.count('"familywise_alpha"') == 2, path
        assert "sd_bound" not in text and '"rho": 0.0,\n          "trials"' not in text
    for path in [E04, REPO / "plans" / "E04_PLAN.json"]:
        plan = load_plan(path)
        for stage in plan.stages:
            validate_stage(plan, stage)


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_the_planning_rule_and_the_confirmatory_intervals_read_the_same_alpha(alpha):
    from prereg.rp002a.config_stage import sd_bound
    from prereg.rp002a.confirmatory_stage import decisions
    from prereg.rp002a.stats.intervals import replicate_mean_t_interval

    plan = json.loads(PIPELINE.read_text())
    decision = plan["parameters"]["decision"]
    decision["familywise_alpha"] = alpha
    assert sd_bound(plan)["familywise_alpha"] == alpha
    assert sd_bound(plan)["family_size"] == decision["family_size"]
    replicates = plan["stages"]["target-variance"]["parameters"]["replicates"]
    assert sd_bound(plan)["df"] == replicates - 1
    family = plan["parameters"]["contrast_family"]
    records = [
        {
            "world": world,
            "replicate": r,
            "contrasts": {c["id"]: 0.001 * r + 0.0003 * i for i, c in enumerate(family)},
            "diagnostics": {},
        }
        for world in plan["parameters"]["world_order"]
        for r in range(1, 4)
    ]
    config = {"branch": "precise", "n": 3, "resource_limited_precision": False}
    row = decisions(plan, records, config)["contrasts"][0]
    expected = replicate_mean_t_interval(
        [r["contrasts"][row["contrast"]] for r in records if r["world"] == family[0]["world"]],
        alpha=alpha,
        family_size=decision["family_size"],
        inflation=decision["primary_inflation"],
    )
    assert row["critical_uninflated"] == expected.critical


# -- attacks on approval records ---------------------------------------------------------


def test_a_duplicate_key_in_an_approval_record_is_refused_at_load_and_by_approve(tmp_path):
    toy = make_toy_repo(tmp_path / "toy")
    toy.approve("toy", RUN)
    record = toy.root / "plans" / "approvals" / f"{RUN}.json"
    text = record.read_text()
    assert '"stage": "toy"' in text
    record.write_text(
        text.replace('"stage": "toy"', '"stage": "other-stage",\n  "stage": "toy"', 1)
    )
    toy.commit("An approval record that says two things")
    with pytest.raises(ValueError, match=r"approval record .*toy-20261130-001\.json.*key 'stage'"):
        load_approval(record)
    done = toy.prereg(
        "approve", "--stage", "toy", "--run-id", "toy-20261130-002", "--accept-deviations"
    )
    assert done.returncode == REFUSED, done.stdout + done.stderr
    assert f"{RUN}.json" in done.stderr and "key 'stage' appears twice" in done.stderr
    assert not (toy.root / "plans" / "approvals" / "toy-20261130-002.json").exists()
    gate = toy.pytest("--research-stage=toy")
    assert gate.returncode == GATE_REFUSED, gate.stdout + gate.stderr
    assert "key 'stage' appears twice" in gate.stdout + gate.stderr
    assert not (toy.root / "runs" / RUN / "start.json").exists(), "the refusal spent the run id"


# -- the same attacks through prereg approve in a toy repository -------------------------


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return make_toy_repo(tmp_path_factory.mktemp("plans") / "toy")


STAGE_OF_KIND = {
    "plain": "toy",
    "rp002a.calibration": "calibration",
    "rp002a.target-variance": "target-variance",
    "e04.robustness": "e04",
}


def _toy_plan(kind: str, dotted: str | None = None, value=None) -> dict:
    """The toy plan with one stage of ``kind`` (a real kind's stage keeps its real name)."""
    stage = STAGE_OF_KIND[kind]
    if kind == "plain":
        shared, spec = {}, stage_spec(stage)
    else:
        source = json.loads((E04 if kind == "e04.robustness" else PIPELINE).read_text())
        shared, spec = source.get("parameters", {}), source["stages"][stage]
        spec = dict(spec, module="experiments/test_toy.py", seed_namespace="toy-1.0")
    plan = {
        "plan_id": "toy-1.0",
        "protocol": "toy protocol for the plan checks",
        "environment_pins": dict(PINS),
        **({"parameters": shared} if shared else {}),
        "stages": {stage: spec},
    }
    if dotted is not None:
        _set(plan, dotted, copy.deepcopy(value))
    return plan


def _approve(toy, plan_text: str, stage: str):
    (toy.root / "plans" / "TOY_PLAN.json").write_text(plan_text)
    toy.commit("A plan under attack")
    return toy.prereg(
        "approve", "--stage", stage, "--run-id", f"{stage}-20261130-001", "--accept-deviations"
    )


def _assert_refused(toy, done, stage: str, *named: str) -> None:
    assert done.returncode == REFUSED, done.stdout + done.stderr
    assert "prereg approve: refused" in done.stderr, done.stderr
    for phrase in named:
        assert phrase in done.stderr, done.stderr
    assert not (toy.root / "plans" / "approvals" / f"{stage}-20261130-001.json").exists()


TOY_ATTACKS = [
    # (id, stage kind, dotted path, value, what the refusal names)
    ("budget-zero", "plain", "stages.toy.budget_seconds", 0, "field stages.toy.budget_seconds must be a finite number > 0"),
    ("budget-negative", "plain", "stages.toy.budget_seconds", -1, "field stages.toy.budget_seconds"),
    ("threads-zero", "plain", "stages.toy.threads_per_worker", 0, "field stages.toy.threads_per_worker must be an integer >= 1"),
    ("threads-negative", "plain", "stages.toy.threads_per_worker", -4, "field stages.toy.threads_per_worker"),
    ("threads-fraction", "plain", "stages.toy.threads_per_worker", 0.5, "field stages.toy.threads_per_worker"),
    ("replicates-zero", "rp002a.target-variance", "stages.target-variance.parameters.replicates", 0, "field stages.target-variance.parameters.replicates must be an integer >= 2"),
    ("replicates-negative", "rp002a.target-variance", "stages.target-variance.parameters.replicates", -3, "field stages.target-variance.parameters.replicates"),
    ("batch-size-zero", "rp002a.target-variance", "parameters.training.batch_size", 0, "field parameters.training.batch_size"),
    ("model-size-zero", "rp002a.target-variance", "parameters.models.B2.sizes.hidden", 0, "field parameters.models.B2.sizes.hidden"),
    ("trials-zero", "rp002a.calibration", "stages.calibration.parameters.simulation.trials", 0, "field stages.calibration.parameters.simulation.trials"),
    ("alpha-out-of-range", "rp002a.calibration", "parameters.decision.familywise_alpha", 1.5, "field parameters.decision.familywise_alpha must be a finite number in (0, 1)"),
    ("task-count-zero", "e04.robustness", "stages.e04.parameters.tasks.count", 0, "field tasks.count"),
    ("unread-rho", "rp002a.calibration", "stages.calibration.parameters.bootstrap_benchmark.rho", 0.0, "unknown field stages.calibration.parameters.bootstrap_benchmark.rho"),
]  # fmt: skip


@pytest.mark.parametrize("attack", TOY_ATTACKS, ids=lambda a: a[0])
def test_prereg_approve_refuses_an_out_of_range_or_unread_field(toy, attack):
    _, kind, dotted, value, named = attack
    stage = STAGE_OF_KIND[kind]
    done = _approve(toy, json.dumps(_toy_plan(kind, dotted, value), indent=2), stage)
    _assert_refused(toy, done, stage, "TOY_PLAN.json", named)


TOY_TEXT_ATTACKS = [
    # (id, stage kind, (old, new) text substitution, what the refusal names)
    ("duplicate-key", "plain", ('"budget_seconds": 600,', '"budget_seconds": 600,\n "budget_seconds": 6,'), "key 'budget_seconds' appears twice"),
    ("nan-budget", "plain", ('"budget_seconds": 600,', '"budget_seconds": NaN,'), "constant NaN"),
    ("infinite-budget", "plain", ('"budget_seconds": 600,', '"budget_seconds": Infinity,'), "constant Infinity"),
    ("overflowing-budget", "plain", ('"budget_seconds": 600,', '"budget_seconds": 1e999,'), "1e999 overflows"),
    ("nan-threads", "plain", ('"threads_per_worker": 1,', '"threads_per_worker": NaN,'), "constant NaN"),
    ("nan-count", "rp002a.target-variance", ('"replicates": 3,', '"replicates": NaN,'), "constant NaN"),
    ("duplicate-nested-key", "rp002a.calibration", ('"statements": 90,', '"statements": 90,\n "statements": 9,'), "key 'statements' appears twice"),
]  # fmt: skip


@pytest.mark.parametrize("attack", TOY_TEXT_ATTACKS, ids=lambda a: a[0])
def test_prereg_approve_refuses_a_duplicate_key_or_non_finite_constant(toy, attack):
    _, kind, (old, new), named = attack
    stage = STAGE_OF_KIND[kind]
    text = json.dumps(_toy_plan(kind), indent=2)
    assert old in text, old
    done = _approve(toy, text.replace(old, new, 1), stage)
    _assert_refused(toy, done, stage, "TOY_PLAN.json", named)


@pytest.mark.parametrize(
    "second_home",
    [
        ("confirmatory-config", "sd_bound", {"familywise_alpha": 0.1}),
        ("confirmatory-config", "familywise_alpha", 0.1),
    ],
    ids=["sd-bound", "bare"],
)
def test_a_second_alpha_for_the_planning_rule_is_refused_by_approve(toy, second_home):
    stage, field, value = second_home
    source = json.loads(PIPELINE.read_text())
    plan = _toy_plan("rp002a.target-variance")
    plan["stages"][stage] = dict(
        source["stages"][stage], module="experiments/test_toy.py", requires=[]
    )
    plan["stages"][stage]["parameters"][field] = value
    done = _approve(toy, json.dumps(plan, indent=2), stage)
    _assert_refused(
        toy, done, stage, f"unknown field stages.{stage}.parameters.{field}", "TOY_PLAN.json"
    )


@pytest.mark.parametrize("kind", ["plain", "rp002a.target-variance", "rp002a.calibration"])
def test_an_honest_toy_plan_of_each_kind_is_approved(tmp_path, kind):
    """The refusals above are the attacks', not the plans': unmodified, each kind approves."""
    toy = make_toy_repo(tmp_path / "toy")
    stage = STAGE_OF_KIND[kind]
    done = _approve(toy, json.dumps(_toy_plan(kind), indent=2), stage)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (toy.root / "plans" / "approvals" / f"{stage}-20261130-001.json").exists()


def test_an_honest_e04_toy_plan_passes_validation_at_approve(tmp_path):
    """E04 needs its inputs bound to be approved; its refusal then names them, not the plan."""
    toy = make_toy_repo(tmp_path / "toy")
    done = _approve(toy, json.dumps(_toy_plan("e04.robustness"), indent=2), "e04")
    assert done.returncode == REFUSED and "binds inputs" in done.stderr, done.stderr
    assert "TOY_PLAN.json" not in done.stderr, done.stderr
