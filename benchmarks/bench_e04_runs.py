"""Time whole E04 research runs as users run them: a cold run, then a warm one on its cache.

Usage::

    python benchmarks/make_go_stdlib_repo.py DATA --install     # once: the Go stdlib corpus
    python benchmarks/bench_e04_runs.py --data DATA [--workers 2] [--out DIR]

Clones this checkout's HEAD into ``DIR/repo`` (default: a new temporary folder), writes
``plans/E04_GOSTDLIB_PLAN.json`` there (``plans/E04_PLAN.json`` with synthetic inputs
allowed, its own plan id and seed namespace: the real plan refuses generated tasks), and
then, twice, approves, commits, runs ``pytest --research-stage=e04 -n WORKERS`` and audits.
The first run starts with an empty vector cache (cold), the second reads the cache the
first filled (warm). Prints each run's wall time, the seconds pytest spent in the items,
the audit's wall time, the warm/cold ratio (the baseline is the cold run of the same
invocation), and whether the two runs' result files are byte-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prereg.base.hashing import sha256_file
from prereg.records.runs import RunFolder

CHECKOUT = Path(__file__).resolve().parents[1]
PLAN = "plans/E04_GOSTDLIB_PLAN.json"


def result_files(run_dir: Path) -> dict[str, str]:
    """SHA-256 of each of a run's result files
    (:meth:`prereg.records.runs.RunFolder.result_files`)."""
    return {rel: sha256_file(path) for rel, path in RunFolder(run_dir).result_files().items()}


def timed(command: list[str], cwd: Path, env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return seconds, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="make_go_stdlib_repo.py's DEST")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-e04-runs-"))
    repo = out / "repo"
    subprocess.run(["git", "clone", "-q", str(CHECKOUT), str(repo)], check=True)
    # A scratch clone: a run pushes its records to every remote, and these are not the
    # checkout's runs (nor may a run id spent by an earlier benchmark refuse this one).
    subprocess.run(["git", "remote", "remove", "origin"], cwd=repo, check=True)
    for key, value in (("user.email", "bench@example.org"), ("user.name", "Bench")):
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    plan = json.loads((repo / "plans" / "E04_PLAN.json").read_text())
    plan["plan_id"] = "e04-robustness-1.0-gostdlib"
    stage = plan["stages"]["e04"]
    stage["seed_namespace"] = "e04-1.0-gostdlib"
    stage["parameters"]["allow_synthetic"] = True
    (repo / PLAN).write_text(json.dumps(plan, indent=2) + "\n")
    subprocess.run(["git", "add", PLAN], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "The Go stdlib plan"], cwd=repo, check=True)
    env = dict(os.environ)
    if (repo / "lib" / "prereg").is_dir():  # prereg's own checkout: run the clone's package
        env["PYTHONPATH"] = str(repo / "lib")
    inputs = [
        "--input", f"repository={args.data / 'repository'}",
        "--input", f"tasks={args.data / 'tasks.json'}",
        "--input", f"reformulations={args.data / 'reformulations.json'}",
    ]  # fmt: skip
    today = time.strftime("%Y%m%d")
    prereg = [sys.executable, "-m", "prereg.cli"]
    rows, files = [], []
    for number, label in ((1, "cold"), (2, "warm")):
        run_id = f"e04-{today}-{number:03d}"
        timed([*prereg, "approve", "--stage", "e04", "--plan", PLAN, "--run-id", run_id,
               *inputs, "--accept-deviations"], repo, env)  # fmt: skip
        subprocess.run(["git", "add", "plans/approvals"], cwd=repo, check=True)
        subprocess.run(["git", "commit", "-q", "-m", f"Approve {run_id}"], cwd=repo, check=True)
        run_seconds, _ = timed(
            [sys.executable, "-m", "pytest", "--research-stage=e04", "-n", str(args.workers), "-q"],
            repo,
            env,
        )
        manifest = json.loads((repo / "runs" / run_id / "manifest.json").read_text())
        items = sum(item["elapsed_seconds"] or 0.0 for item in manifest["items"])
        audit_seconds, audit = timed([*prereg, "audit", f"runs/{run_id}"], repo, env)
        clean = "clean" in audit
        rows.append((label, run_id, manifest["status"], run_seconds, items, audit_seconds, clean))
        files.append(result_files(repo / "runs" / run_id))
    print(f"E04 on {args.data} ({len(files[0])} result files), {args.workers} workers, in {repo}")
    print(f"{'run':<5} {'run id':<18} {'status':<9} {'wall s':>8} {'items s':>8} "
          f"{'audit s':>8}  audit")  # fmt: skip
    for label, run_id, status, wall, items, audit, clean in rows:
        verdict = "clean" if clean else "FINDINGS"
        print(
            f"{label:<5} {run_id:<18} {status:<9} {wall:8.1f} {items:8.1f} {audit:8.1f}  {verdict}"
        )
    print(f"warm / cold wall time: {rows[1][3] / rows[0][3]:.3f}")
    print(f"result files byte-identical: {files[0] == files[1]}")


if __name__ == "__main__":
    main()
