"""What ``prereg status`` shows, as data: per stage, its unspent approvals (committed or
not), its next free run id, its latest complete run, and which run consumed which.

Stages come from the plans pytest.ini names under ``prereg_plans``; a stage that only an
approval record or a run folder names is listed too, with no plan.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

from prereg.base import gitrepo
from prereg.decisions.approval import (
    APPROVALS,
    latest_complete_run,
    load_approval,
    next_free_run_id,
    used_run_ids,
)
from prereg.kinds.plans import load_plan
from prereg.kinds.stages import ini_list
from prereg.records import ledger
from prereg.records.runs import all_runs, has_started, is_plan_superseded, valid_run_id

COMMITTED = "committed"
NOT_COMMITTED = "not committed"
EDITED = "edited since its commit"


def plan_paths(root: Path) -> list[str]:
    """The plans pytest.ini names under ``prereg_plans``, relative to the root, in order."""
    return ini_list(root, "prereg_plans")


def commit_state(root: Path, path: Path) -> str:
    """Whether HEAD holds ``path`` with these bytes: committed, not committed, or edited."""
    rel = Path(path).relative_to(root).as_posix()
    try:
        recorded = gitrepo.show_bytes(root, "HEAD", rel)
    except gitrepo.GitError:  # not in HEAD, or no commit yet
        return NOT_COMMITTED
    return COMMITTED if recorded == Path(path).read_bytes() else EDITED


def project_status(root: Path, today: date | str | None = None) -> dict:
    """Everything ``prereg status`` shows (its ``--json`` output).

    ``{"stages": [...], "problems": [...]}``; each stage is ``{"stage", "plan",
    "unspent_approvals": [{"run_id", "path", "commit_state", "committed"}],
    "next_free_run_id", "latest_complete_run", "plan_sha256" (of the plan file now), "runs":
    [{"run_id", "status", "plan_sha256" (the plan it ran under), "plan_superseded"}],
    "consumes": [{"run_id", "state", "requires": {stage: run_id}}],
    "consumed_by": {run_id: [{"run_id", "state"}: the runs and approvals consuming it]}}``.
    ``state`` is ``run`` (the run's manifest or start names the runs it consumed) or
    ``approved`` (an approval binds them; the run has not started)."""
    root = Path(root)
    problems: list[str] = []
    stages: dict[str, str | None] = {}
    plan_hashes: dict[str, str] = {}  # plan path -> the SHA-256 load_plan read
    for rel in plan_paths(root):
        try:
            plan = load_plan(root / rel)
        except (OSError, ValueError, LookupError, TypeError) as err:
            problems.append(f"plan {rel} (pytest.ini prereg_plans) cannot be read: {err}")
            continue
        plan_hashes[rel] = plan.sha256
        for stage in plan.stages:
            stages.setdefault(stage, rel)

    approvals = []
    folder = root / APPROVALS
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            approvals.append(load_approval(path))
        except (OSError, ValueError, LookupError, TypeError) as err:
            problems.append(f"{path.relative_to(root)} is not a valid approval record: {err}")
    runs = [r for r in all_runs(root) if valid_run_id(r.run_id)]
    spent = set(ledger.spent_run_ids(root))
    spent |= _spent_on_remotes(root, {a.run_id for a in approvals} - spent, problems)
    committed = [a for a in approvals if commit_state(root, a.path) == COMMITTED]
    if committed and not spent and not ledger.remotes(root):
        problems.append(
            f"{len(committed)} committed approval(s), and this clone holds no refs/prereg/* "
            "record and has no remote to ask: git clone does not copy them. If these approvals "
            "ran in another clone, fetch its records before you run (git fetch <that clone> "
            "'refs/prereg/*:refs/prereg/*'); a spent run id is refused only where its record is"
        )
    for remote in ledger.remotes_not_fetching_records(root):
        problems.append(
            f"git fetch from remote {remote} does not bring the records of spent run ids that "
            "other clones pushed (the gate asks the remote before it spends, but this clone's "
            f"status and audit read only what it holds): git config --add remote.{remote}.fetch "
            f"'{ledger.FETCH_REFSPEC}' && git fetch {remote}"
        )
    for stage in [a.stage for a in approvals] + [r.stage for r in runs if r.stage]:
        stages.setdefault(stage, None)

    # Who consumed whom: a run's manifest (or the approval copy it started under) names the
    # runs it consumed; an approval not yet run names the runs it binds.
    consumes: dict[str, dict] = {}
    for approval in approvals:
        started = approval.run_id in spent or has_started(root, approval.run_id)
        consumes[approval.run_id] = {
            "stage": approval.stage,
            "state": "run" if started else "approved",
            "requires": {s: b.run_id for s, b in approval.record.requires.items()},
        }
    for run in runs:
        requires = (run.manifest or {}).get("requires")
        if isinstance(requires, dict):
            consumes[run.run_id] = {
                "stage": run.stage,
                "state": "run",
                "requires": {
                    s: b.get("run_id") for s, b in requires.items() if isinstance(b, dict)
                },
            }

    used = used_run_ids(root)
    listed = []
    for stage, plan_rel in stages.items():
        unspent = [
            {
                "run_id": a.run_id,
                "path": a.path.relative_to(root).as_posix(),
                "commit_state": commit_state(root, a.path),
            }
            for a in approvals
            if a.stage == stage and a.run_id not in spent and not has_started(root, a.run_id)
        ]
        for entry in unspent:
            entry["committed"] = entry["commit_state"] == COMMITTED
        try:
            next_free = next_free_run_id(root, stage, today, used=used)
        except ValueError as err:
            next_free = None
            problems.append(str(err))
        consumed_by: dict[str, list[dict]] = {}
        for consumer, entry in sorted(consumes.items()):
            for needed, bound in entry["requires"].items():
                if needed == stage and bound:
                    consumed_by.setdefault(bound, []).append(
                        {"run_id": consumer, "state": entry["state"]}
                    )
        listed.append(
            {
                "stage": stage,
                "plan": plan_rel,
                "unspent_approvals": unspent,
                "next_free_run_id": next_free,
                "latest_complete_run": latest_complete_run(root, stage),
                "plan_sha256": plan_hashes.get(plan_rel) if plan_rel else None,
                "runs": [
                    {
                        "run_id": r.run_id,
                        "status": r.status,
                        "plan_sha256": r.plan_sha256,
                        "plan_superseded": is_plan_superseded(root, (r.manifest or {}).get("plan")),
                    }
                    for r in runs
                    if r.stage == stage
                ],
                "consumes": [
                    {"run_id": rid, "state": e["state"], "requires": e["requires"]}
                    for rid, e in sorted(consumes.items())
                    if e["stage"] == stage and e["requires"]
                ],
                "consumed_by": consumed_by,
            }
        )
    return {"stages": listed, "problems": problems}


def _runs_by_plan(entry: dict) -> list[str]:
    """The stage's runs grouped by the plan they ran under: the plan file's bytes now first,
    then each superseded plan, so runs of an earlier plan are never hidden among the rest."""
    groups: dict[str | None, list[dict]] = {}
    for run in entry["runs"]:
        groups.setdefault(run["plan_sha256"], []).append(run)
    lines = []
    current = entry["plan_sha256"]
    for sha, members in sorted(groups.items(), key=lambda g: (g[0] != current, g[0] or "")):
        if sha is None:
            label = "no recorded plan"
        elif sha == current:
            label = f"plan {sha[:12]} (the plan file now)"
        elif any(run["plan_superseded"] for run in members):
            label = f"plan {sha[:12]} (superseded)"
        else:
            label = f"plan {sha[:12]}"
        named = ", ".join(f"{run['run_id']} ({run['status']})" for run in members)
        lines.append(f"  under {label}: {named}")
    return lines


def _spent_on_remotes(root: Path, unspent: set[str], problems: list[str]) -> set[str]:
    """Which of the approvals ``unspent`` here a git remote records as spent (``git clone``
    does not copy ``refs/prereg/*``); each is a problem line, as is a remote that could not
    be asked. No remote is asked when every approval is spent here."""
    if not unspent:
        return set()
    found: set[str] = set()
    for remote, spent in ledger.remote_spent_run_ids(root).items():
        if isinstance(spent, str):
            problems.append(
                f"remote {remote} could not be asked which run ids it records as spent ({spent}): "
                "an approval listed as unspent may have run in another clone"
            )
            continue
        for run_id in sorted(unspent & set(spent)):
            found.add(run_id)
            problems.append(
                f"{run_id} is spent: remote {remote} records its start, which this clone has "
                f"not fetched (git fetch {remote} 'refs/prereg/*:refs/prereg/*'); the gate "
                "refuses it here too"
            )
    return found


def render(status: dict) -> list[str]:
    """The lines ``prereg status`` prints."""
    lines = []
    if not status["stages"]:
        lines.append(
            "no stages: pytest.ini names no plan under prereg_plans, and no approval record or "
            "run exists (write a plan under plans/ and name it under prereg_plans in pytest.ini)"
        )
    for entry in status["stages"]:
        plan = entry["plan"] or "no plan in pytest.ini's prereg_plans names it"
        lines.append(f"stage {entry['stage']} ({plan})")
        if entry["plan_sha256"]:
            lines.append(f"  plan sha256:         {entry['plan_sha256']}")
        if entry["unspent_approvals"]:
            for a in entry["unspent_approvals"]:
                note = a["commit_state"]
                if not a["committed"]:
                    note += f": git add {a['path']} && git commit, before the run"
                lines.append(f"  unspent approval:    {a['run_id']} ({note})")
        else:
            lines.append("  unspent approval:    none")
        lines.append(f"  next free run id:    {entry['next_free_run_id'] or 'none today'}")
        runs = entry["runs"]
        lines.append(
            f"  latest complete run: {entry['latest_complete_run'] or 'none'}"
            f" ({len(runs)} run{'' if len(runs) == 1 else 's'} under runs/)"
        )
        lines.extend(_runs_by_plan(entry))
        for consumed in entry["consumes"]:
            verb = "consumed" if consumed["state"] == "run" else "binds (approved, not run yet)"
            bound = ", ".join(f"{s} {r}" for s, r in sorted(consumed["requires"].items()))
            lines.append(f"  {consumed['run_id']} {verb}: {bound}")
        for run_id, consumers in sorted(entry["consumed_by"].items()):
            named = ", ".join(
                c["run_id"] if c["state"] == "run" else f"{c['run_id']} (approved, not run yet)"
                for c in consumers
            )
            lines.append(f"  {run_id} is consumed by: {named}")
    for problem in status["problems"]:
        lines.append(f"problem: {problem}")
    return lines
