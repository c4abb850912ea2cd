"""Time the research loop's overhead on a toy stage against the same items under plain pytest.

Usage::

    .venv/bin/python benchmarks/bench_harness_overhead.py [--repeats 3] [--quick] \\
        [--keep DIR] [--out result.json]

In a scratch git repository (``prereg.testing.ScratchProject``) a plain-kind stage ``toy``
has ten parametrized items; each computes for about 5 ms (a busy loop) and writes a small
JSON file to its ``research.outputs``. A sibling folder, outside the repository and without
the plugin (``-p no:prereg.plugin``), holds a plain module with the same ten bodies writing
to a folder of its own. Only the commands a user types are timed, each as a fresh process,
wall clock from launch to exit:

* plain ``pytest``, serial and ``-n 2`` (the baseline), and plain ``pytest`` serial with
  the prereg plugin autoloaded (what merely installing prereg costs a software run);
* ``prereg approve --stage toy --run-id toy-<date>-NNN --accept-deviations``, then
  ``git add`` + ``git commit`` of the record (a fresh run id for every research run);
* ``pytest --research-stage=toy``, serial and ``-n 2``;
* ``prereg audit runs/<run-id>``;
* the *signed and timestamped loop*, in a second copy of the project set up as the README
  recommends (approver, runner and auditor keys, a witness, a local ``openssl ts``
  authority on loopback that the registration card names): ``prereg approve
  --timestamp-authority URL --witness PATH``, a signed commit, a serial run,
  ``prereg audit --sign`` and ``prereg verify --require-audit`` against the card.

Every phase runs ``--repeats`` times, interleaved (one repetition runs every phase once),
so the baseline shares the machine's load; the table gives the median and the minimum,
the ratio of the median to the plain-pytest median in the same mode, and the seconds
added. A research run is split with its manifest's ``started_at`` and ``ended_at`` (the
manifest format's own fields): *before the run id is spent* (interpreter start, plugin
load, the gate, the clean listing of the whole stage), *items* (start record to manifest
end) and *after* (writing and recording the manifest, exit); the items' own time is the
sum and the maximum of the manifest's ``items[].elapsed_seconds``. The machine may be
shared: figures are printed, never asserted. Results: docs/records/HARNESS_OVERHEAD.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from prereg.proof.witness import init as init_witness
from prereg.testing import ScratchProject

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT / "checks"))  # the checks' toy stage (support.toy)

from support import tsa
from support.toy import PINS, stage_spec

CELLS = 10
BUSY_SECONDS = 0.005

BODY = """
def work(cell):
    # About {busy_ms} ms of computing, whatever the machine's speed.
    deadline = time.perf_counter() + {busy}
    spins = 0
    while time.perf_counter() < deadline:
        spins += 1
    return {{"cell": cell, "squares": [cell * k * k for k in range(8)]}}
"""

RESEARCH_MODULE = (
    """
import json, time
import pytest

pytestmark = pytest.mark.research_stage("toy")
"""
    + BODY
    + """

@pytest.mark.parametrize("cell", range({cells}), ids=lambda c: f"cell{{c}}")
def test_cell(cell, research):
    research.coords(cell=cell)
    (research.outputs / "result.json").write_text(json.dumps(work(cell)))
"""
)

PLAIN_MODULE = (
    """
import json, time
from pathlib import Path
import pytest

OUT = Path(__file__).parent / "out"
"""
    + BODY
    + """

@pytest.mark.parametrize("cell", range({cells}), ids=lambda c: f"cell{{c}}")
def test_cell(cell):
    folder = OUT / f"cell{{cell}}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps(work(cell)))
"""
)


def render(module: str) -> str:
    return module.format(cells=CELLS, busy=BUSY_SECONDS, busy_ms=round(BUSY_SECONDS * 1000))


def tool(name: str, module: str) -> list[str]:
    """The console script a user types (``.venv/bin/NAME``), else ``python -m MODULE``."""
    script = Path(sys.executable).parent / name
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


PYTEST = tool("pytest", "pytest")
PREREG = tool("prereg", "prereg.cli")


def build(workdir: Path) -> tuple[ScratchProject, ScratchProject]:
    """The scratch project with the approved-to-be stage ``toy``, and the plain folder."""
    return toy_project(workdir / "project"), plain_folder(workdir / "plain")


def toy_project(root: Path) -> ScratchProject:
    project = ScratchProject(root)
    project.root.mkdir(parents=True)
    project.init(plans=["plans/TOY_PLAN.json"])
    spec = stage_spec(
        "toy", module="experiments/test_toy.py", parameters={"cells": CELLS}, budget_seconds=600
    )
    plan = {
        "plan_id": "toy-1.0",
        "protocol": "toy stage for benchmarks/bench_harness_overhead.py",
        "environment_pins": PINS,
        "stages": {"toy": spec},
    }
    (project.root / "plans" / "TOY_PLAN.json").write_text(json.dumps(plan, indent=2) + "\n")
    (project.root / "experiments" / "test_toy.py").write_text(render(RESEARCH_MODULE))
    project.commit("Toy project")
    return project


def plain_folder(root: Path) -> ScratchProject:
    plain = ScratchProject(root)
    plain.root.mkdir()
    (plain.root / "pytest.ini").write_text("[pytest]\naddopts = -p no:randomly\n")
    (plain.root / "test_toy.py").write_text(render(PLAIN_MODULE))
    return plain


class Signed(NamedTuple):
    """The toy project set up for the signed and timestamped loop."""

    project: ScratchProject
    authority: tsa.Authority
    witness: Path
    card: Path
    auditor_key: Path


def build_signed(workdir: Path) -> Signed:
    """Keys for the three roles, a witness and a timestamp authority, and the card."""
    project = toy_project(workdir / "signed")
    keys = project.set_up_signing(workdir / "keys")
    authority = tsa.start(workdir / "authority")
    witness = init_witness(workdir / "witness.git")
    card = workdir / "card.json"
    register = [*PREREG, "register", "--witness", str(witness)]
    register += ["--timestamp-authority", authority.url]
    register += ["--timestamp-root", str(authority.folder / "root.pem")]
    card.write_text(project.run(*register, check=True).stdout)
    return Signed(project, authority, witness, card, keys["auditor"])


def timed(where: ScratchProject, *commands: list[str]) -> tuple[float, float, float]:
    """Run ``commands`` one after the other; (seconds, launch epoch, exit epoch). A command
    that fails stops the benchmark with its output: the figures would mean nothing."""
    launched = time.time()
    start = time.perf_counter()
    for command in commands:
        done = where.run(*command)
        if done.returncode != 0:
            raise SystemExit(
                f"{' '.join(command)} exited {done.returncode} in {where.root}:\n"
                f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
    return time.perf_counter() - start, launched, time.time()


def epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


def one_repetition(
    project: ScratchProject,
    plain: ScratchProject,
    signed: Signed,
    next_run_id,
    samples: dict[str, list[float]],
) -> None:
    def add(phase: str, seconds: float) -> None:
        samples.setdefault(phase, []).append(seconds)

    add("plain serial", timed(plain, [*PYTEST, "-p", "no:prereg.plugin"])[0])
    add("plain -n 2", timed(plain, [*PYTEST, "-p", "no:prereg.plugin", "-n", "2"])[0])
    add("plain serial, plugin autoloaded", timed(plain, PYTEST)[0])
    for mode, extra in (("serial", []), ("-n 2", ["-n", "2"])):
        run_id = next_run_id()
        record = f"plans/approvals/{run_id}.json"
        approve = [*PREREG, "approve", "--stage", "toy", "--run-id", run_id, "--accept-deviations"]
        approve_s = timed(project, approve)[0]
        commit_s = timed(
            project, ["git", "add", record], ["git", "commit", "-q", "-m", f"Approve {run_id}"]
        )[0]
        run_s, launched, ended = timed(project, [*PYTEST, "--research-stage=toy", *extra])
        audit_s = timed(project, [*PREREG, "audit", f"runs/{run_id}"])[0]
        manifest = json.loads((project.root / "runs" / run_id / "manifest.json").read_text())
        started_at, ended_at = epoch(manifest["started_at"]), epoch(manifest["ended_at"])
        add(f"approve ({mode} run)", approve_s)
        add(f"commit ({mode} run)", commit_s)
        add(f"research {mode}", run_s)
        add(f"research {mode}: before the run id is spent", started_at - launched)
        add(f"research {mode}: items (started_at to ended_at)", ended_at - started_at)
        add(f"research {mode}: after ended_at", ended - ended_at)
        item_seconds = [item["elapsed_seconds"] for item in manifest["items"]]
        add(f"research {mode}: item time, sum of items[].elapsed_seconds", sum(item_seconds))
        add(f"research {mode}: item time, slowest item", max(item_seconds))
        add(f"audit ({mode} run)", audit_s)
        add(f"whole loop {mode}", approve_s + commit_s + run_s + audit_s)
    add("signed loop serial", signed_loop(signed, next_run_id()))


def signed_loop(signed: Signed, run_id: str) -> float:
    """Approve naming the card's authority and witness, commit (signed: the project's git
    signs every commit), run, audit with the auditor's signature, verify against the card."""
    approve = [*PREREG, "approve", "--stage", "toy", "--run-id", run_id, "--accept-deviations"]
    approve += ["--timestamp-authority", signed.authority.url, "--witness", str(signed.witness)]
    record = f"plans/approvals/{run_id}.json"
    audit = [*PREREG, "audit", f"runs/{run_id}", "--sign", "--signing-key", str(signed.auditor_key)]
    verify = [*PREREG, "verify", f"runs/{run_id}", "--card", str(signed.card), "--require-audit"]
    return timed(
        signed.project,
        approve,
        ["git", "add", record],
        ["git", "commit", "-q", "-m", f"Approve {run_id}"],
        [*PYTEST, "--research-stage=toy"],
        audit,
        verify,
    )[0]


# (phase, the baseline it is compared with, or None: an indented breakdown line)
TABLE = [
    ("plain serial", "plain serial"),
    ("plain -n 2", "plain -n 2"),
    ("plain serial, plugin autoloaded", "plain serial"),
    ("approve (serial run)", "plain serial"),
    ("commit (serial run)", "plain serial"),
    ("research serial", "plain serial"),
    ("research serial: before the run id is spent", None),
    ("research serial: items (started_at to ended_at)", None),
    ("research serial: after ended_at", None),
    ("research serial: item time, sum of items[].elapsed_seconds", None),
    ("research serial: item time, slowest item", None),
    ("audit (serial run)", "plain serial"),
    ("whole loop serial", "plain serial"),
    ("approve (-n 2 run)", "plain -n 2"),
    ("commit (-n 2 run)", "plain -n 2"),
    ("research -n 2", "plain -n 2"),
    ("research -n 2: before the run id is spent", None),
    ("research -n 2: items (started_at to ended_at)", None),
    ("research -n 2: after ended_at", None),
    ("research -n 2: item time, sum of items[].elapsed_seconds", None),
    ("research -n 2: item time, slowest item", None),
    ("audit (-n 2 run)", "plain -n 2"),
    ("whole loop -n 2", "plain -n 2"),
    ("signed loop serial", "plain serial"),
]

# Phases that replace a plain pytest run (added = phase - baseline); the others are steps
# plain pytest does not have at all (added = the whole phase).
REPLACES_BASELINE = {
    "plain serial",
    "plain -n 2",
    "plain serial, plugin autoloaded",
    "research serial",
    "research -n 2",
    "whole loop serial",
    "whole loop -n 2",
    "signed loop serial",
}


def table(samples: dict[str, list[float]]) -> str:
    lines = [
        f"{'phase':<50} {'n':>2} {'median s':>9} {'min s':>7} {'ratio':>6} {'added s':>8}",
        "-" * 87,
    ]
    for phase, baseline in TABLE:
        values = samples[phase]
        median, low = statistics.median(values), min(values)
        if baseline is None:
            label = "  " + phase.split(": ", 1)[1]
            lines.append(f"{label:<50} {len(values):>2} {median:>9.3f} {low:>7.3f}")
            continue
        base = statistics.median(samples[baseline])
        added = median - base if phase in REPLACES_BASELINE else median
        lines.append(
            f"{phase:<50} {len(values):>2} {median:>9.3f} {low:>7.3f} "
            f"{median / base:>6.2f} {added:>+8.3f}"
        )
    return "\n".join(lines)


def git_head() -> str:
    """The short HEAD of the checkout the measured ``prereg`` is imported from (an editable
    install: ``<checkout>/lib/prereg``), and whether tracked files differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=CHECKOUT, capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{head} with uncommitted changes" if dirty else head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="repetitions of every phase")
    parser.add_argument("--quick", action="store_true", help="one repetition (--repeats 1)")
    parser.add_argument("--keep", type=Path, help="build the scratch projects here and keep them")
    parser.add_argument("--out", type=Path, help="write every sample as JSON here")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    if not 1 <= repeats <= 400:
        parser.error(f"--repeats {repeats}: give 1 to 400 (run ids toy-<date>-001 to -800)")
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
    counter = iter(range(1, 1000))

    def next_run_id() -> str:
        return f"toy-{today}-{next(counter):03d}"

    print(
        f"prereg {git_head()} ({CHECKOUT}), {datetime.datetime.now().isoformat(timespec='seconds')}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"toy stage: {CELLS} items of {BUSY_SECONDS * 1000:.0f} ms computing + one JSON output; "
        f"{repeats} repetition(s), interleaved"
    )
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as scratch:
        workdir = args.keep or Path(scratch)
        if args.keep and args.keep.exists() and any(args.keep.iterdir()):
            parser.error(f"--keep {args.keep}: the folder is not empty; name a new or empty one")
        project, plain = build(workdir)
        signed = build_signed(workdir)
        samples: dict[str, list[float]] = {}
        timed(plain, [*PYTEST, "-p", "no:prereg.plugin"])  # warm the file cache, not counted
        try:
            for repetition in range(repeats):
                one_repetition(project, plain, signed, next_run_id, samples)
                print(f"repetition {repetition + 1}/{repeats} done", flush=True)
        finally:
            signed.authority.stop()
    print(
        "ratio: median / median of plain pytest in the same mode; added: median minus that "
        "median for a pytest run or the whole loop, the whole median for approve, commit, audit"
    )
    print(table(samples))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        args.out.write_text(json.dumps({"commit": git_head(), "samples": samples}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
