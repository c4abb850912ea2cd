"""Render one run's page and the index of all runs, and write them under ``runs/reports/``.

Reports live in ``runs/reports/<run-id>.html`` (refusals: ``refused-<record>.html``) and the
index in ``runs/reports/index.html``, not inside the run folder: a run folder is the hashed
record the audit checks file by file (an extra file there is a finding), while a report is
derived from it and can be regenerated at any time.
"""

from __future__ import annotations

import traceback
from datetime import datetime, timezone
from pathlib import Path

from prereg.commands.report import header
from prereg.decisions.audit import COULD_NOT_AUDIT, audit_run, audit_run_cached
from prereg.kinds.report import html as h
from prereg.kinds.report.model import (
    NO_MANIFEST,
    REFUSED,
    RunRecord,
    folderless_runs,
    load_run,
    outcome_summary,
    plan_at_run,
    refusals,
)
from prereg.kinds.report.sections import SectionContext, kind_named, section_for
from prereg.proof import who
from prereg.records.runs import RunLayout, all_runs, reports_dir, reports_index, valid_run_id

AUDIT_MODES = ("full", "cached", "none")


def report_path(root: Path, record: RunRecord) -> Path:
    if record.status == REFUSED:
        return reports_dir(root) / f"refused-{record.path.stem}.html"
    if valid_run_id(record.run_id):
        return RunLayout(root, record.run_id).report
    # A record claiming no run id: named after its folder (no path is built from the claim).
    return reports_dir(root) / f"{record.path.name}.html"


def audit_verdict(
    root: Path, record: RunRecord, mode: str, *, listing: bool = False
) -> header.AuditVerdict:
    """Run the audit as ``mode`` says: full (replay now), cached (an earlier replay's verdict
    when an auditor signed it, or with ``listing`` when prereg stored it), none."""
    if mode not in AUDIT_MODES:
        raise ValueError(f"audit mode {mode!r} is not one of {AUDIT_MODES}")
    if record.status == REFUSED:
        return header.AuditVerdict("nothing to audit", (), "a refusal spends no run id")
    if mode == "none":
        return header.AuditVerdict("not audited", (), "skipped (--no-audit)")
    try:
        return _audit(root, record, mode, listing)
    except Exception as err:  # noqa: BLE001 -- an audit that cannot run is itself the verdict
        return header.AuditVerdict(
            "audit could not run", (f"{type(err).__name__}: {err}",), f"mode {mode}"
        )


def _audit(root: Path, record: RunRecord, mode: str, listing: bool) -> header.AuditVerdict:
    checked = "hashes, records, git records and inputs"
    if mode == "full":
        result = audit_run(root, record.path)
    else:
        result = audit_run_cached(root, record.path, listing=listing)
    if result.replayed:
        what = f"{checked} and replay, all checked now ({result.replay_note})"
    else:
        what = f"{checked} checked now; {result.replay_note}"
    if result.verdict == COULD_NOT_AUDIT:
        verdict = "could not audit"
    else:
        verdict = "clean" if not result.findings else f"{len(result.findings)} finding(s)"
    return header.AuditVerdict(verdict, tuple(result), what)


def _kind(plan: dict | None, stage: str | None) -> str | None:
    try:
        return plan["stages"][stage]["kind"]
    except (KeyError, TypeError):
        return None


def render_report(
    root: Path, record: RunRecord, *, audit: str = "cached", now: str | None = None
) -> str:
    """The whole HTML page of one run or refusal."""
    generated = now or datetime.now(timezone.utc).isoformat(timespec="seconds")
    title = f"{record.stage or '?'} {record.run_id}: {record.status}"
    nav = '<p><a href="index.html">all runs</a></p>'
    if record.status == REFUSED:
        body = [f"<h1>{h.esc(title)}</h1>", nav, header.refusal_section(record)]
        return h.page(title, "\n".join(body), generated=generated)
    plan, plan_source = plan_at_run(root, record)
    kind = _kind(plan, record.stage)
    body = [
        f"<h1>{h.esc(title)}</h1>",
        nav,
        header.preregistration_section(plan, record.stage, plan_source=plan_source),
        header.header_section(record, plan_source=plan_source, kind=kind),
        header.audit_section(audit_verdict(root, record, audit)),
        header.signatures_section(who.signers(root, record.path)),
    ]
    if record.complete:
        renderer = section_for(kind)
        if renderer is None:
            body.append(
                h.section(
                    "Stage results",
                    h.paragraph(
                        f"Stage kind {kind!r} renders no report section here (it is not known "
                        "here, or its StageKind has no render); the summary files are listed in "
                        "the manifest."
                    ),
                    section_id="stage",
                )
            )
        else:
            context = SectionContext(root=root, record=record, plan=plan, kind=kind)
            try:
                body.append(renderer(context))
            except Exception:  # noqa: BLE001 -- a broken summary must not hide the rest
                body.append(
                    h.section(
                        "Stage results could not be rendered",
                        h.pre(traceback.format_exc()),
                        section_id="stage-error",
                    )
                )
    else:
        body.append(header.failure_section(record))
    body.append(header.items_section(record))
    return h.page(title, "\n".join(body), generated=generated)


def write_report(root: Path, run_path: Path, *, audit: str = "cached") -> Path:
    """Render the run (or refusal record) at ``run_path`` and write its page; returns the path."""
    record = load_run(Path(run_path))
    path = report_path(root, record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(root, record, audit=audit), encoding="utf-8")
    return path


def every_run(root: Path) -> list[RunRecord]:
    """Every started run under runs/ (by run id), then every refusal (by record name)."""
    started = [load_run(state.path) for state in all_runs(root)] + folderless_runs(root)
    return sorted(started, key=lambda r: r.run_id) + refusals(root)


def headline(root: Path, record: RunRecord) -> str | None:
    """The kind's one line of a complete run's result (:attr:`StageKind.headline`), or None:
    the run is not complete, or its kind gives none or is unknown here."""
    if not record.complete:
        return None
    plan, _ = plan_at_run(root, record)
    kind = _kind(plan, record.stage)
    found = kind_named(kind)
    line = found.headline if found is not None else None
    if line is None:
        return None
    try:
        text = line(SectionContext(root=root, record=record, plan=plan, kind=kind))
    except Exception as error:  # noqa: BLE001 -- a broken summary must not hide the index
        return f"headline unreadable: {type(error).__name__}: {error}"
    if text is not None and not isinstance(text, str):
        return f"headline unreadable: the kind's headline returned {type(text).__name__}, not a str"
    return text


def index_rows(root: Path, records: list[RunRecord], *, audit: str = "cached") -> list[dict]:
    """One row per run or refusal: stage, run id, status, when, elapsed, the items' outcome,
    the kind's headline of a complete run, and the audit verdict (of the records: a clean
    audit says nothing of the outcome)."""
    rows = []
    for record in records:
        if record.status == NO_MANIFEST and audit != "none":
            verdict = header.AuditVerdict("not auditable (no manifest)", (), "")
        else:
            verdict = audit_verdict(root, record, audit, listing=True)
        rows.append(
            {
                "stage": record.stage,
                "run_id": record.run_id,
                "status": record.status,
                "when": record.when,
                "elapsed_seconds": record.elapsed_seconds,
                "budget_seconds": (record.manifest or {}).get("budget", {}).get("seconds"),
                "outcome": outcome_summary(record),
                "headline": headline(root, record),
                "rehearsals": record.rehearsals,
                "amendment": record.amendment,
                "plan_sha256": record.plan_sha256,
                "plan_superseded": record.plan_superseded(root),
                "audit": verdict.verdict,
                "audit_findings": list(verdict.findings),
                "path": str(record.path),
                "report": str(report_path(root, record)),
            }
        )
    return rows


def plan_note(row: dict) -> str:
    """How a run's plan stands: its hash, then amended since its stage's previous approval
    (and why), superseded by the plan file's bytes now, both, or neither."""
    notes = [f"plan {row['plan_sha256'][:12]}"] if row["plan_sha256"] else []
    if row["amendment"]:
        notes.append(f"amended: {row['amendment']['reason']}")
    if row["plan_superseded"]:
        notes.append("superseded")
    return "; ".join(notes)


def render_index(rows: list[dict], *, now: str | None = None) -> str:
    generated = now or datetime.now(timezone.utc).isoformat(timespec="seconds")
    table = h.table(
        [
            "stage",
            "run id",
            "status",
            "when (UTC)",
            "elapsed (s)",
            "budget (s)",
            "items",
            "result",
            "plan",
            "audit of the records",
        ],
        [
            [
                r["stage"],
                h.Cell(
                    f'<a href="{h.esc(Path(r["report"]).name)}">{h.esc(r["run_id"])}</a>',
                    sort=r["run_id"],
                    markup=True,
                ),
                h.Cell(header.status_badge(r["status"]), sort=r["status"], markup=True),
                r["when"],
                r["elapsed_seconds"],
                r["budget_seconds"],
                r["outcome"],
                r["headline"] or "",
                plan_note(r),
                r["audit"],
            ]
            for r in rows
        ],
    )
    body = (
        f"<h1>Runs</h1>\n<p>{len(rows)} run(s) and refusal(s) under runs/. The items column is "
        "the run's outcome; the audit judges the records (hashes, approval, git records, "
        "inputs, replay), so a run whose items failed can audit clean.</p>\n" + table
    )
    return h.page("prereg runs", body, generated=generated)


def write_index(root: Path, rows: list[dict]) -> Path:
    path = reports_index(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_index(rows), encoding="utf-8")
    return path
