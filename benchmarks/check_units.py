"""Refresh ``checks/check_seconds.json`` from a software run's ``--durations=0`` output.

Usage::

    .venv/bin/pytest -m software -n 2 --durations=0 > run.log
    .venv/bin/python benchmarks/check_units.py run.log [--note "TEXT"] [--write]

Every phase (setup, call, teardown) ``--durations=0`` lists is summed into the check's unit
of work (``checks/conftest.py`` ``unit_of``: its module, or a shared folder). The units'
sum is the run's worker time, which ``checks/lint/test_check_budget.py`` holds to the
file's ``budget_seconds``. Without ``--write`` the units and their sum are only printed,
largest first, beside the recorded ones.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
RECORD = CHECKOUT / "checks" / "check_seconds.json"
sys.path.insert(0, str(CHECKOUT / "checks"))  # checks/conftest.py's unit_of

from support.suite import checks_conftest

unit_of = checks_conftest().unit_of

# "12.34s call     checks/gate/test_gate.py::test_x[a]"
DURATION = re.compile(r"^\s*([0-9.]+)s\s+(setup|call|teardown)\s+(\S+)")


def units_of(log: str) -> dict[str, float]:
    """Seconds per unit of work, summed over every phase a ``--durations=0`` listing holds."""
    units: dict[str, float] = defaultdict(float)
    for line in log.splitlines():
        found = DURATION.match(line)
        if found:
            units[unit_of(found.group(3))] += float(found.group(1))
    return dict(units)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the output of a run with --durations=0")
    parser.add_argument("--write", action="store_true", help="write the units into the record")
    parser.add_argument("--note", help="what the run was (the record's 'about', with the sum)")
    args = parser.parse_args(argv)
    units = units_of(args.log.read_text(errors="replace"))
    if not units:
        parser.error(f"{args.log}: no --durations=0 lines found (run pytest with --durations=0)")
    record = json.loads(RECORD.read_text())
    old = record["units"]
    for unit, seconds in sorted(units.items(), key=lambda pair: -pair[1]):
        print(f"{seconds:8.1f}  (recorded {old.get(unit, 0):6.1f})  {unit}")
    total = sum(units.values())
    print(f"{total:8.1f}  worker seconds in all (recorded {sum(old.values()):.1f}); "
          f"budget {record['budget_seconds']}")  # fmt: skip
    if args.write:
        record["units"] = {unit: round(s) for unit, s in sorted(units.items(), key=lambda p: -p[1])}
        if args.note:
            record["about"] = args.note
        RECORD.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
