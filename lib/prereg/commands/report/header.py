"""The parts every report has: header, failure record, items, audit verdict, refusal."""

from __future__ import annotations

from dataclasses import dataclass

from prereg.kinds.report import html as h
from prereg.kinds.report.model import Missing, RunRecord, missing_items, peak_memory
from prereg.records import describe_amendment, describe_disclosures
from prereg.records.runs import report_page, valid_run_id

MIB = 1024 * 1024


def status_badge(status: str) -> str:
    css = "status-" + status.replace(" ", "-")
    return f'<span class="status {h.esc(css)}">{h.esc(status)}</span>'


def _hash(value: str | None) -> h.Cell:
    return h.Cell(f"<code>{h.esc(value or '-')}</code>", markup=True)


def _elapsed(manifest: dict) -> str:
    budget = manifest.get("budget", {})
    elapsed = manifest.get("elapsed_seconds")
    seconds = budget.get("seconds")
    if elapsed is None or not seconds:
        return f"{h.fmt(elapsed)} s"
    share = 100.0 * elapsed / seconds
    return (
        f"{elapsed:.1f} s of a {seconds:g} s budget ({share:.1f} %); budget "
        f"{'enforced' if budget.get('enforced') else 'not enforced'}; "
        f"{'EXCEEDED' if budget.get('exceeded') else 'not exceeded'}"
    )


def preregistration_section(plan: dict | None, stage: str | None, *, plan_source: str) -> str:
    """What was decided before the run: the plan's protocol and description, the stage's
    description, what it requires, and its parameters (the decision rule among them) as
    the plan states them, from the plan at the run's commit."""
    if not isinstance(plan, dict):
        body = h.paragraph(f"The plan could not be read ({plan_source}).")
        return h.section("Preregistration", body, section_id="preregistration")
    spec = (plan.get("stages") or {}).get(stage) or {}
    pairs: list[tuple[str, h.CellLike]] = [
        ("plan", f"{plan.get('plan_id', '?')} ({plan_source})"),
        ("protocol", plan.get("protocol")),
        ("description", plan.get("description")),
        ("stage", stage),
        ("stage description", spec.get("description")),
        ("requires", ", ".join(spec.get("requires") or []) or "no other stage"),
        ("single attempt", spec.get("single_attempt")),
    ]
    body = [
        h.key_values(pairs),
        h.paragraph("The stage's parameters, as the plan states them:"),
        h.value_tree(spec.get("parameters")),
    ]
    return h.section("Preregistration", "\n".join(body), section_id="preregistration")


def rehearsals_table(disclosures: list[dict]) -> str:
    """The rehearsals the run's approval disclosed, one row each."""
    rows = [
        [
            d["name"],
            d["status"],
            d["started_at"],
            d["selection"] or "the whole stage",
            d["summary_files"],
            h.Cell(f"<code>{h.esc(d['plan']['sha256'][:12])}</code>", markup=True),
            h.Cell(f"<code>{h.esc((d['tree'] or '-')[:12])}</code>", markup=True),
            d["uncommitted_paths"],
        ]
        for d in disclosures
    ]
    return h.table(
        ["rehearsal", "status", "started (UTC)", "items", "summary files", "plan SHA-256",
         "tree", "uncommitted paths"],
        rows,
        caption="Rehearsals since the stage's previous approval (what was tried before this one)",
    )  # fmt: skip


def header_section(record: RunRecord, *, plan_source: str, kind: str | None) -> str:
    """Stage, run id, status, provenance, environment, deviations, elapsed, peak memory."""
    m = record.manifest or {}
    start = record.start or {}
    pairs: list[tuple[str, h.CellLike]] = [
        ("stage", record.stage),
        ("stage kind", kind or "unknown"),
        ("run id", record.run_id),
        ("status", h.Cell(status_badge(record.status), markup=True)),
        ("source commit", _hash(m.get("source_commit") or start.get("source_commit"))),
        ("source anchor (approved)", _hash(m.get("source_anchor"))),
        (
            "plan",
            h.Cell(
                f"{h.esc(m.get('plan', {}).get('path', '-'))} SHA-256 "
                f"<code>{h.esc(m.get('plan', {}).get('sha256') or start.get('plan_sha256'))}</code>",
                markup=True,
            ),
        ),
        ("plan read from", plan_source),
        (
            "approval",
            h.Cell(
                f"{h.esc(m.get('approval', {}).get('path', '-'))} SHA-256 "
                f"<code>{h.esc(m.get('approval', {}).get('sha256') or start.get('approval_sha256'))}</code>",
                markup=True,
            ),
        ),
        ("baseline SHA-256", _hash(m.get("baseline_sha256"))),
        ("seed namespace", m.get("seed_namespace")),
        ("rehearsals before approval", describe_disclosures(record.rehearsals)),
        ("plan amendment", describe_amendment(record.amendment)),
        ("started", m.get("started_at") or start.get("started_at")),
        ("ended", m.get("ended_at")),
        ("elapsed", _elapsed(m) if m else "unknown (no manifest)"),
        ("workers", m.get("workers")),
    ]
    peak = peak_memory(record.items)
    if peak is None:
        pairs.append(("peak memory", "not recorded"))
    else:
        pairs.append(
            (
                "peak memory (max over items)",
                (
                    f"{peak.bytes / MIB:.1f} MiB ({peak.bytes} bytes) in {peak.nodeid}; "
                    f"scope: {'; '.join(peak.scopes)}"
                ),
            )
        )
    body = [h.key_values(pairs)]
    body.append(deviations_table(m.get("deviations")))
    env = m.get("environment")
    if env:
        body.append(environment_block(env))
    if record.rehearsals:
        body.append(rehearsals_table(record.rehearsals))
    if m.get("requires"):
        rows = [
            [
                stage,
                consumed_run_link(v.get("run_id")),
                h.Cell(f"<code>{h.esc(v.get('manifest_sha256', '-'))}</code>", markup=True),
            ]
            for stage, v in sorted(m["requires"].items())
        ]
        body.append(
            h.table(
                ["required stage", "run id", "manifest SHA-256"],
                rows,
                caption="Runs of earlier stages consumed",
            )
        )
    if m.get("inputs"):
        rows = [
            [name, h.Cell(f"<code>{h.esc(v)}</code>", markup=True)]
            for name, v in sorted(m["inputs"].items())
        ]
        body.append(h.table(["input", "binding"], rows, caption="Bound inputs"))
    return h.section("Run", "\n".join(body), section_id="header")


def deviations_table(deviations: list[dict] | None) -> str:
    if deviations is None:
        return h.paragraph("Deviations: not recorded (no manifest).")
    if not deviations:
        return h.paragraph("Deviations from the plan's environment pins: none.")
    rows = [[d.get("field"), d.get("pinned"), d.get("actual")] for d in deviations]
    return h.table(
        ["field", "pinned by the plan", "this run"],
        rows,
        caption=f"Named deviations from the plan's environment pins ({len(rows)})",
    )


def _extensions_text(extensions: object) -> str:
    """The installed stage kinds, law families and harness kinds the controller loaded."""
    if not isinstance(extensions, dict):
        return f"malformed: {extensions!r}"
    entries = [
        f"{group} {name}: {origin.get('entry_point')} from {origin.get('distribution')}"
        if isinstance(origin, dict)
        else f"{group} {name}: malformed"
        for group, named in sorted(extensions.items())
        for name, origin in sorted(named.items() if isinstance(named, dict) else [])
    ]
    return "; ".join(entries) or "none (built-in code only)"


def environment_block(env: dict) -> str:
    pairs = [
        ("python", f"{env.get('python')} ({env.get('implementation')})"),
        ("interpreter", env.get("interpreter")),
        ("platform", env.get("platform")),
        ("host", env.get("host")),
        (
            "threads",
            ", ".join(f"{k}: {v}" for k, v in sorted(env.get("thread_settings", {}).items())),
        ),
    ]
    if "extensions" in env:  # manifests written before extensions were recorded have none
        pairs.append(("installed extensions", _extensions_text(env["extensions"])))
    packages = env.get("packages_imported", {})
    body = h.key_values(pairs)
    body += h.details(
        f"packages imported by the test processes ({len(packages)})",
        h.table(["package", "version"], sorted(packages.items())),
    )
    plugins = env.get("pytest_plugins", {})
    if isinstance(plugins, list):  # manifests written before loaded and blocked were told apart
        plugins = {"loaded": plugins, "blocked": []}
    body += h.details(
        f"pytest plugins: {len(plugins['loaded'])} loaded, blocked: {', '.join(plugins['blocked']) or 'none'}",
        h.pre("\n".join(plugins["loaded"])),
    )
    return f"<h3>Environment</h3>\n{body}"


def failure_section(record: RunRecord) -> str:
    """Why the run is not complete, which items did not pass, and their tracebacks."""
    missing: Missing = missing_items(record)
    reasons = (record.manifest or {}).get("incomplete_reasons") or []
    body = []
    if record.manifest is None:
        body.append(
            h.paragraph(
                "This run has a start record but no manifest: it is still running, or its controller "
                "was killed. Items below come from items.jsonl (written as each item finished).",
                css="note",
            )
        )
    else:
        body.append(
            h.paragraph(
                "This run is incomplete: it has no complete-stage summary, and no aggregate is shown. "
                "Its run id is spent; a stage that requires it refuses to start.",
                css="note",
            )
        )
    if reasons:
        body.append("<h3>Incomplete reasons</h3>")
        body.extend(h.pre(r) for r in reasons)
    expected = "unknown (no manifest)" if missing.expected is None else missing.expected
    body.append(
        h.key_values(
            [
                ("items expected", expected),
                ("items with a record", missing.present),
                ("items passed", missing.passed),
                ("items not passed", len(missing.not_passed)),
            ]
        )
    )
    if missing.not_passed:
        body.append(h.table(["item", "outcome"], missing.not_passed, caption="Items not passed"))
    tracebacks = [
        (i["nodeid"], phase, text)
        for i in record.items
        for phase, text in sorted(i.get("tracebacks", {}).items())
    ]
    if tracebacks:
        body.append("<h3>Tracebacks</h3>")
        for nodeid, phase, text in tracebacks:
            body.append(f"<h4>{h.esc(nodeid)} ({h.esc(phase)})</h4>\n{h.pre(text)}")
    return h.section("What is missing and why", "\n".join(body), section_id="failure")


def items_section(record: RunRecord) -> str:
    rows = []
    for item in record.items:
        rss = item.get("peak_rss_bytes")
        coords = ", ".join(f"{k}={v}" for k, v in sorted((item.get("coords") or {}).items()))
        rows.append(
            [
                item.get("nodeid", "?").split("::", 1)[-1],
                item.get("outcome", "?"),
                coords,
                h.Cell(
                    h.fmt(item.get("elapsed_seconds")),
                    sort=item.get("elapsed_seconds") or 0,
                    numeric=True,
                ),
                h.Cell("-" if rss is None else f"{rss / MIB:.1f}", sort=rss or 0, numeric=True),
                len(item.get("outputs", [])),
                "; ".join(item.get("seeds", [])),
            ]
        )
    table = h.table(
        [
            "item",
            "outcome",
            "coordinates",
            "elapsed (s)",
            "peak RSS (MiB)",
            "output files",
            "seed derivations",
        ],
        rows,
    )
    return h.section(
        f"Items ({len(rows)})",
        h.details("every item of the run (click a header to sort)", table),
        section_id="items",
    )


@dataclass(frozen=True)
class AuditVerdict:
    """The audit's result as shown: mode says how much was checked now."""

    verdict: str  # clean | N finding(s) | not audited
    findings: tuple[str, ...]
    mode: str


def audit_section(verdict: AuditVerdict) -> str:
    body = [
        h.key_values(
            [
                (
                    "verdict",
                    h.Cell(
                        f'<span class="{"" if verdict.verdict == "clean" else "bad"}">'
                        f"{h.esc(verdict.verdict)}</span>",
                        markup=True,
                    ),
                ),
                ("what was checked", verdict.mode),
            ]
        )
    ]
    if verdict.findings:
        body.append("<ul>" + "".join(f"<li>{h.esc(f)}</li>" for f in verdict.findings) + "</ul>")
    return h.section("Audit", "\n".join(body), section_id="audit")


SPENT_CONDITION = "run-id-unused"  # prereg.decisions.gate.run_id_unused


def signatures_section(rows: list[tuple[str, str]]) -> str:
    """Who approved, ran and audited, by the keys that signed (:mod:`prereg.proof.who`)."""
    body = [
        h.key_values(rows),
        h.paragraph(
            "Names come from the repository's own role files (.prereg/); prereg verify checks "
            "them against the project's published registration card."
        ),
    ]
    return h.section("Signatures", "\n".join(body), section_id="signatures")


def refusal_note(refusals: list[dict]) -> str:
    """What a refusal page says of the run id and the fix; it never calls a run id unspent
    when the refusal is that an earlier run spent it (condition run-id-unused)."""
    conditions = {r.get("condition") for r in refusals if isinstance(r, dict)}
    if SPENT_CONDITION in conditions:
        return (
            "The gate refused this run before any item ran; the refusal itself spent nothing. "
            f"Condition {SPENT_CONDITION}: an earlier run spent this run id, or a folder "
            "runs/<run-id>/ is in the way; its message says which. A spent run id never runs "
            "again: approve a new run id."
        )
    return (
        "The gate refused this run before any item ran; the run id was not spent. Fix the "
        "named condition and run again under the same approval."
    )


def refusal_section(record: RunRecord) -> str:
    data = record.refusal or {}
    body = [
        h.paragraph(refusal_note(data.get("refusals") or []), css="note"),
        h.key_values(
            [
                ("stage", data.get("stage")),
                ("run id", data.get("run_id")),
                ("approval", data.get("approval")),
                ("refused at", data.get("refused_at")),
                ("HEAD", _hash(data.get("head"))),
                ("status", h.Cell(status_badge(record.status), markup=True)),
            ]
        ),
        h.table(
            ["condition", "message"],
            [[r.get("condition"), r.get("message")] for r in data.get("refusals", [])],
            caption="Failed gate conditions",
        ),
    ]
    return h.section("Refusal", "\n".join(body), section_id="refusal")


def consumed_run_link(run_id: object) -> object:
    """A consumed run's id, linked to its report beside this one (``runs/reports/``)."""
    if not valid_run_id(run_id):
        return run_id  # shown as recorded; a path is never built from another value
    return h.Cell(f'<a href="{h.esc(report_page(run_id))}">{h.esc(run_id)}</a>', markup=True)
