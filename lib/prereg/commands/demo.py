"""``prereg demo``: every stage end to end at demo scale, through the real gate.

The committed HEAD is cloned into ``demo-output/<time>/repo`` (with no remote: its runs
never reach the project's ledger, :mod:`prereg.records.ledger`); there each stage is
approved with its demo plan (``plans/demo/``), the approval committed (signed with a
throwaway approver key), the stage run with pytest through the gate (its attestation signed
with a throwaway runner key), the run audited (the audit signed with a throwaway auditor
key) and verified from the clone's registration card (:mod:`prereg.proof`). The clone's own
``lib/`` is put first on ``PYTHONPATH`` so the code that runs is the code that was approved.
The stages and their demo plans are :data:`prereg.commands.demo_steps.STEPS`, the ones the
protocols declare (:data:`prereg.commands.demo_steps.PROTOCOL_DEMOS`; a caller may pass
others, as the pipeline checks do); this module imports them, never the other way round.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from prereg.base import gitrepo
from prereg.base.hashing import read_json
from prereg.commands import signing
from prereg.commands.demo_steps import STEPS, DemoStep
from prereg.proof import keys
from prereg.records.runs import RunLayout, reports_index


class DemoFailed(RuntimeError):
    pass


def _run(cmd: list[str], cwd: Path, env: dict, *, quiet: bool = False) -> None:
    print(f"\n$ {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=quiet, check=False)
    if done.returncode != 0:
        if quiet:
            print(done.stdout, done.stderr, sep="\n")
        raise DemoFailed(f"{' '.join(cmd[:4])} ... exited {done.returncode}")


def run_demo(
    root: Path, *, keep: bool = False, steps: list[DemoStep] | None = None, reports: bool = True
) -> int:
    """Every step approved, committed, run, audited (signed) and verified in a scratch clone
    of ``root``'s HEAD, then (``reports``) every run's report and the index written."""
    steps = steps if steps is not None else STEPS
    if gitrepo.dirty_paths(root):
        print(
            "prereg demo: note: the demo runs the committed HEAD; uncommitted changes are not included"
        )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = root / "demo-output" / stamp
    clone = out / "repo"
    out.mkdir(parents=True)
    gitrepo.git(root, "clone", "--quiet", str(root), str(clone))
    # The demo's runs are not the project's: with no remote they neither ask the project's
    # ledger about their run ids nor push their spends into it.
    gitrepo.git(clone, "remote", "remove", "origin")
    gitrepo.git(clone, "config", "user.name", "prereg demo")
    gitrepo.git(clone, "config", "user.email", "demo@prereg.invalid")
    # Throwaway keys sign every approval and run; the card registers the roles and plans.
    made = signing.set_up(clone, out / "keys")
    gitrepo.git(clone, "add", keys.ROLES_DIR)
    gitrepo.git(clone, "commit", "-q", "-m", "Register the demo's approver and runner")
    card = out / "card.json"
    card.write_text(signing.register(clone, None))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(clone / "lib") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env[keys.RUNNER_KEY_VARIABLE] = str(made["runner"])
    py = sys.executable
    day = datetime.now(timezone.utc).strftime("%Y%m%d")
    print(f"prereg demo: scratch clone {clone}")
    done_runs = []
    try:
        for step in steps:
            run_id = f"{step.stage}-{day}-001"
            print(f"\n=== stage {step.stage} (run {run_id}, plan {step.plan}) ===", flush=True)
            inputs = step.prepare(out) if step.prepare else {}
            approve = [
                py,
                "-m",
                "prereg.cli",
                "approve",
                "--stage",
                step.stage,
                "--run-id",
                run_id,
                "--plan",
                step.plan,
                "--accept-deviations",
            ]
            for name, path in inputs.items():
                approve += ["--input", f"{name}={path}"]
            _run(approve, clone, env)
            _run(["git", "add", "plans/approvals"], clone, env, quiet=True)
            _run(["git", "commit", "-q", "-m", f"Approve {run_id}"], clone, env, quiet=True)
            pytest_cmd = [
                py,
                "-m",
                "pytest",
                f"--research-stage={step.stage}",
                "-p",
                "no:cacheprovider",
            ]
            if step.workers > 1:
                pytest_cmd += ["-n", str(step.workers)]
            _run(pytest_cmd, clone, env)
            audit = [py, "-m", "prereg.cli", "audit", f"runs/{run_id}", "--sign"]
            _run([*audit, "--signing-key", str(made["auditor"])], clone, env)
            verify = [py, "-m", "prereg.cli", "verify", f"runs/{run_id}", "--card", str(card)]
            _run([*verify, "--require-audit"], clone, env)
            done_runs.append(RunLayout(clone, run_id))
            if step.after:
                step.after(clone, run_id)
    except DemoFailed as err:
        print(f"\nprereg demo: stopped: {err}. Everything written so far is kept in {out}")
        return 1
    if reports:
        try:
            _run([py, "-m", "prereg.cli", "report", "--all"], clone, env)
        except DemoFailed as err:
            print(f"\nprereg demo: the reports could not be written: {err}")
            return 1
    print("\n=== demo finished: every stage complete, audited clean and verified ===")
    print(f"  registration card: {card} (keys: {out / 'keys'}, throwaway)")
    for run in done_runs:
        manifest = read_json(run.manifest, what="manifest")
        print(f"  {manifest['stage']:<22} {manifest['status']:<10} {run.manifest}")
        if run.summary_dir.exists():
            print(f"  {'':<22} {'summary':<10} {run.summary_dir}")
        if reports:
            print(f"  {'':<22} {'report':<10} {run.report}")
    if reports:
        print(f"  runs index: {reports_index(clone)}")
    return 0
