"""The ``prereg`` command: approve, audit, runs, demo, report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from prereg import gitrepo
from prereg.runs import all_runs


def _root() -> Path:
    try:
        return gitrepo.toplevel(Path.cwd())
    except gitrepo.GitError:
        raise SystemExit("prereg: run this inside the project's git checkout") from None


def _pairs(values: list[str], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"prereg: {option} takes NAME=VALUE, got {value!r}")
        pairs[name] = path
    return pairs


def cmd_approve(args: argparse.Namespace) -> int:
    from prereg.approval import ApprovalError, create_approval
    from prereg.schema import SchemaError

    root = _root()
    plan_path = Path(args.plan) if args.plan else _default_plan(root, args.stage)
    try:
        path = create_approval(
            root,
            stage=args.stage,
            run_id=args.run_id,
            plan_path=plan_path,
            inputs=_pairs(args.input, "--input"),
            use_runs=_pairs(args.use_run, "--use-run"),
            accept_deviations=args.accept_deviations,
        )
    except (ApprovalError, SchemaError, FileNotFoundError, KeyError) as err:
        print(f"prereg approve: refused: {err}", file=sys.stderr)
        return 2
    rel = path.relative_to(root)
    print(f"wrote {rel}")
    print("commit it, then run the stage:")
    print(f"  git add {rel}")
    print(f"  git commit -m 'Approve {args.run_id}'")
    print(f"  pytest --research-stage={args.stage}")
    return 0


def _default_plan(root: Path, stage: str) -> Path:
    import configparser

    from prereg.plans import load_plan

    ini = configparser.ConfigParser()
    ini.read(root / "pytest.ini")
    for rel in ini.get("pytest", "prereg_plans", fallback="").split():
        if stage in load_plan(root / rel).stages:
            return Path(rel)
    raise SystemExit(
        f"prereg approve: no plan in pytest.ini's prereg_plans has a stage {stage!r}; pass --plan"
    )


def cmd_audit(args: argparse.Namespace) -> int:
    from prereg.audit import audit_run
    from prereg.hashing import read_json

    root = _root()
    run_dir = Path(args.run_dir).resolve()
    findings = audit_run(root, run_dir, replay=not args.no_replay)
    manifest = run_dir / "manifest.json"
    status = read_json(manifest, what="manifest")["status"] if manifest.exists() else "no manifest"
    if findings:
        print(f"audit of {run_dir.name}: {len(findings)} finding(s) (run status: {status})")
        for finding in findings:
            print(f"  - {finding}")
        return 1
    print(
        f"audit of {run_dir.name}: clean (run status: {status}"
        f"{'' if args.no_replay else ', replay included'})"
    )
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    root = _root()
    rows = []
    for run in all_runs(root):
        m = run.manifest or {}
        rows.append(
            {
                "run_id": run.run_id,
                "stage": run.stage,
                "status": run.status,
                "started_at": m.get("started_at"),
                "elapsed_seconds": m.get("elapsed_seconds"),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no runs under runs/")
    for r in rows:
        print(
            f"{r['run_id']:<40} {r['stage'] or '?':<22} {r['status']:<12} "
            f"{r['started_at'] or '-':<30} {r['elapsed_seconds'] if r['elapsed_seconds'] is not None else '-'}"
        )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from prereg.demo import run_demo

    return run_demo(_root(), keep=args.keep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prereg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    approve = sub.add_parser("approve", help="write a one-run approval record from the clean HEAD")
    approve.add_argument("--stage", required=True)
    approve.add_argument("--run-id", required=True, help="<stage>-YYYYMMDD-NNN")
    approve.add_argument(
        "--plan", help="plan file (default: the plan in pytest.ini naming the stage)"
    )
    approve.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="an input the stage binds (a file by SHA-256, a git repository by HEAD)",
    )
    approve.add_argument(
        "--use-run",
        action="append",
        default=[],
        metavar="STAGE=RUN_ID",
        help="the run of a required stage to consume (default: its latest complete run)",
    )
    approve.add_argument(
        "--accept-deviations",
        action="store_true",
        help="name this machine's deviations from the plan's environment pins in the record",
    )
    approve.set_defaults(func=cmd_approve)

    audit = sub.add_parser("audit", help="verify a run's hashes and binding, and replay it")
    audit.add_argument("run_dir")
    audit.add_argument("--no-replay", action="store_true", help="hashes and binding only")
    audit.set_defaults(func=cmd_audit)

    runs = sub.add_parser("runs", help="list the runs under runs/")
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(func=cmd_runs)

    demo = sub.add_parser(
        "demo", help="run every stage end to end at demo scale in a scratch clone"
    )
    demo.add_argument("--keep", action="store_true", help="keep earlier demo clones")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
