"""The ``prereg`` command: init, approve, validate-inputs, audit, runs, status, demo, report,
keys, register, verify."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import signal
import sys
from pathlib import Path

from prereg.base import gitrepo


def _root() -> Path:
    """The checkout; its code folders go on sys.path (a stage kind may live there)."""
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.kinds.stages import use_project_code

    try:
        root = gitrepo.toplevel(Path.cwd())
    except gitrepo.GitError:
        raise SystemExit("prereg: run this inside the project's git checkout") from None
    use_project_code(root)
    return root


def _pairs(values: list[str], option: str) -> dict[str, str]:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.runtime.option_policy import name_value_pairs

    try:
        return name_value_pairs(values, option)
    except ValueError as err:
        raise SystemExit(f"prereg: {err}") from None


def cmd_approve(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.base.schema import SchemaError
    from prereg.decisions.approval import (
        ApprovalError,
        bound_run_warnings,
        create_approval,
        load_approval,
        next_free_run_id,
        rehearsal_warning,
    )
    from prereg.kinds.plans import load_plan, signing_required
    from prereg.records import describe_amendment, describe_disclosures
    from prereg.records.runs import RunLayout

    root = _root()
    use_runs = _pairs(args.use_run, "--use-run")
    try:
        run_id = args.run_id or next_free_run_id(root, args.stage)
        # Inside the try: finding the stage's plan loads every plan, and a plan refused at
        # load (duplicate key, NaN, out-of-range number) is a refusal naming the field.
        plan_path = Path(args.plan) if args.plan else _default_plan(root, args.stage)
        path = create_approval(
            root,
            stage=args.stage,
            run_id=run_id,
            plan_path=plan_path,
            inputs=_pairs(args.input, "--input"),
            use_runs=use_runs,
            accept_deviations=args.accept_deviations,
            amend=args.amend,
            witness=args.witness,
            timestamp_authority=args.timestamp_authority,
        )
    except (ApprovalError, SchemaError, OSError, ValueError, LookupError) as err:
        print(f"prereg approve: refused: {err}", file=sys.stderr)
        return 2
    rel = path.relative_to(root)
    if args.run_id is None:
        print(f"run id {run_id}: the next free run id of stage {args.stage} today (UTC)")
    record = load_approval(path).data
    requires = record["requires"]
    for needed, bound in sorted(requires.items()):
        how = "named by --use-run" if needed in use_runs else "its latest complete run"
        print(f"requires {needed}: bound run {bound['run_id']} ({how})")
    if "amendment" in record:
        print(f"amendment recorded: {describe_amendment(record['amendment'])}")
    disclosed = describe_disclosures(record["rehearsals"])
    print(
        f"rehearsals of {args.stage} since its previous approval, listed in the record: {disclosed}"
    )
    warnings = bound_run_warnings(root, requires)
    warnings += [w for w in [rehearsal_warning(root, args.stage)] if w]
    for warning in warnings:
        print(f"prereg approve: warning: {rel}: {warning}", file=sys.stderr)
    print(f"wrote {rel}")
    print("commit it, then run the stage:")
    print(f"  git add {rel}")
    signed = (
        " -S"
        if signing_required(load_plan(root / record["plan"]["path"]).stage(args.stage))
        else ""
    )
    print(
        f"  git commit{signed} -m 'Approve {run_id}'"
        + ("   # signed by an approver" if signed else "")
    )
    print(f"  {_tool(root, 'pytest')} --research-stage={args.stage}   # add -n 2 for two workers")
    folder = RunLayout(root, run_id).folder.relative_to(root)
    print(f"then audit it: {_tool(root, 'prereg')} audit {folder}")
    return 0


VALIDATE_EPILOG = """Checks what `prereg approve` checks of the inputs, and reports every problem
in one pass (approve stops at its first refusal of another kind). Needs no clean
checkout and no run id, and writes nothing. Formats: docs/how-to/e04-inputs.md.

exit codes:
  0  the inputs are valid for the stage
  1  problems: each names the input, the file and the field; printed one a line
  2  could not check: no such plan or stage, or the plan itself is refused
"""


def cmd_validate_inputs(args: argparse.Namespace) -> int:
    """``prereg validate-inputs``: every problem of the inputs a stage would bind."""
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.base.schema import SchemaError
    from prereg.kinds.plans import load_plan
    from prereg.kinds.stages import InputsRefused, load_kind

    root = _root()
    inputs = {name: Path(path).resolve() for name, path in _pairs(args.input, "--input").items()}
    try:
        plan_path = Path(args.plan) if args.plan else _default_plan(root, args.stage)
        plan = load_plan(plan_path if plan_path.is_absolute() else root / plan_path)
        spec = plan.stage(args.stage)
        kind = load_kind(spec["kind"])
    except (SchemaError, OSError, ValueError, LookupError) as err:
        print(f"prereg validate-inputs: could not check: {err}", file=sys.stderr)
        return 2
    declared = list(spec["inputs"])
    problems = [
        f"input {name}: the stage binds no such input; it binds {declared}"
        for name in inputs
        if name not in declared
    ]
    known = {name: path for name, path in inputs.items() if name in declared}
    if kind.check_inputs is None:
        problems += [
            f"input {n}: missing (pass --input {n}=PATH)" for n in declared if n not in known
        ]
        problems += [f"input {n}: {p} does not exist" for n, p in known.items() if not p.exists()]
    else:
        try:
            kind.check_inputs(plan, args.stage, known)
        except InputsRefused as err:
            problems += err.problems
        except Exception as err:  # noqa: BLE001 -- every refusal is a problem to report
            problems.append(str(err))
    if problems:
        print(f"prereg validate-inputs: {len(problems)} problem(s) for stage {args.stage}:")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print(f"prereg validate-inputs: the inputs are valid for stage {args.stage} ({plan_path})")
    return 0


def _tool(root: Path, name: str) -> str:
    """This environment's ``name`` command as the user would type it from the root."""
    path = Path(sys.executable).parent / name
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _default_plan(root: Path, stage: str) -> Path:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.kinds.plans import load_plan
    from prereg.kinds.stages import ini_list

    known: dict[str, str] = {}  # stage -> the first plan naming it
    for rel in ini_list(root, "prereg_plans"):
        for name in load_plan(root / rel).stages:
            known.setdefault(name, rel)
    if stage in known:
        return Path(known[stage])
    close = difflib.get_close_matches(stage, known, n=1)
    raise SystemExit(
        f"prereg approve: no plan in pytest.ini's prereg_plans has a stage {stage!r}"
        + (f"; did you mean {close[0]!r}?" if close else "")
        + (f" The stages are: {', '.join(sorted(known))}." if known else " It names no stage.")
        + " A plan that pytest.ini does not list: pass --plan PATH"
    )


AUDIT_EPILOG = """exit codes:
  0  clean: every record agrees (and the replay, when the stage kind has one, found nothing)
  1  findings: each names the file and field that differs; printed one a line
  3  could not audit, and no finding was made: the run folder is not in a git repository
     (give --repo), git is missing, or the run's source commit is not in the repository

The verdict is stored in runs/audits/<run-id>.json, bound to the SHA-256 of the run's
manifest.json and to the code that audited (the SHA-256 of the prereg package's files,
and its commit), and git records its bytes (refs/prereg/runs/<run-id>/verdict); prereg
report and prereg runs take the replay's clean verdict from it while all three still
match, and say it was stale when not (the replay then runs again).
The replay runs the stage kind of the run's source commit, from a snapshot of it, in a
process of its own; the verdict names that commit and the prereg it imported.
"""


def cmd_audit(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.decisions.audit import COULD_NOT_AUDIT, audit_run, describe_extensions
    from prereg.kinds.stages import use_project_code

    if args.sign and args.no_replay:
        print(
            "prereg audit: refused: --sign records an auditor's signed audit, which a dependent "
            "stage's gate, the report and prereg verify --require-audit take as a replay of the "
            "stage: drop --no-replay",
            file=sys.stderr,
        )
        return 2
    run_dir = Path(args.run_dir).absolute()
    if args.repo:
        root = Path(args.repo).absolute()
    else:
        try:
            root = gitrepo.toplevel(run_dir if run_dir.is_dir() else run_dir.parent)
        except gitrepo.GitError:  # runs/ on another file system, or not a repository
            root = run_dir.parent.parent if run_dir.parent.name == "runs" else run_dir.parent
    use_project_code(root)
    result = audit_run(root, run_dir, replay=not args.no_replay)
    status = result.status or "no readable manifest"
    if result.findings:
        print(f"audit of {run_dir.name}: {len(result.findings)} finding(s) (run status: {status})")
    elif result.verdict == COULD_NOT_AUDIT:
        print(f"audit of {run_dir.name}: could not audit (run status: {status})")
    else:
        print(f"audit of {run_dir.name}: clean (run status: {status}; {result.replay_note})")
    if result.status is not None:  # what the controller loaded from installed packages
        for line in describe_extensions(result.extensions):
            print(f"  {line}")
    for problem in result:
        print(f"  - {problem}")
    if result.findings and result.replay_note:
        print(f"  ({result.replay_note})")
    # A run that could not be audited leaves no verdict (nor a runs/ folder beside a loose run).
    stored = None if result.verdict == COULD_NOT_AUDIT else _store_verdict(root, run_dir, result)
    if stored:
        print(stored)
    if args.sign and result.verdict != COULD_NOT_AUDIT:
        signed = _sign_audit(root, run_dir, result, args)
        if signed is not None:
            print(signed, file=sys.stderr)
            return 2
    return result.exit_code


def _sign_audit(root: Path, run_dir: Path, result, args: argparse.Namespace) -> str | None:
    """Commit the run's verification summary signed (:mod:`prereg.proof.vsa`); say what was
    done, or return why it could not be (None: done)."""
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.base import gitrepo
    from prereg.proof import vsa
    from prereg.records import ATTESTATION, MANIFEST, START_RECORD, formats, ledger
    from prereg.records.formats import Start
    from prereg.records.verdicts import code_identity

    for name in (ATTESTATION, MANIFEST, START_RECORD):
        if not (run_dir / name).is_file():  # a named pipe is no file: never read
            return f"prereg audit --sign: refused: {run_dir.name} has no {name} to summarise"
    try:
        source = formats.load(run_dir / START_RECORD, Start).value.source_commit
        statement = vsa.summary(
            root,
            run_dir,
            clean=not result.findings,
            replayed=result.replayed,
            package_sha256=code_identity()["package_sha256"],
            replay_defined=result.replay_defined,
        )
        key = Path(args.signing_key).absolute() if args.signing_key else None
        made = vsa.commit(root, run_dir.name, source, statement, key)
    except (OSError, ValueError, KeyError, gitrepo.GitError) as err:
        return (
            f"prereg audit --sign: refused: {err}. Sign with an auditor's key: git config "
            "gpg.format ssh and user.signingkey KEY (a key of .prereg/auditors)"
        )
    verdict = statement["predicate"]["verificationResult"]
    print(
        f"signed audit {made[:12]} ({verdict}) recorded as {ledger.signed_audit_ref(run_dir.name)}; "
        f"push it: git push origin '{ledger.signed_audit_ref(run_dir.name)}'"
    )
    return None


def _store_verdict(root: Path, run_dir: Path, result) -> str | None:
    """Store the verdict for ``prereg report``/``runs`` (:mod:`prereg.records.verdicts`); say where.

    A ``--no-replay`` audit does not replace a stored verdict that still matches.
    """
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.records import ledger, verdicts

    if (
        not result.replayed
        and verdicts.staleness(root, verdicts.load(root, run_dir), run_dir) is None
    ):
        return None
    path = verdicts.store(root, run_dir, result)
    if path is None:
        return None
    code = verdicts.code_identity()
    try:
        where = path.relative_to(root)
    except ValueError:
        where = path
    return (
        f"verdict stored in {where} (bound to this manifest's SHA-256 and the audit code, "
        f"{verdicts.code_label(code)}; git records its bytes, "
        f"{ledger.verdict_ref(run_dir.name)}); prereg runs uses it until any changes (a report "
        "page and a dependent stage's gate rely only on an auditor's signed audit, --sign)"
    )


def cmd_runs(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.commands.report.render import every_run, index_rows
    from prereg.records import describe_amendment, describe_disclosures

    root = _root()
    rows = index_rows(root, every_run(root), audit="none" if args.no_audit else "cached")
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no runs under runs/")
    width = max([len("items"), *(len(r["outcome"]) for r in rows)])
    print(
        f"{'stage':<20} {'run id':<34} {'status':<12} {'plan':<12} {'when (UTC)':<30} "
        f"{'elapsed (s)':>11}  {'items':<{width}}  audit of the records"
    )
    for r in rows:
        elapsed = "-" if r["elapsed_seconds"] is None else f"{r['elapsed_seconds']:.1f}"
        plan = (r["plan_sha256"] or "-")[:12]
        print(
            f"{r['stage'] or '?':<20} {r['run_id']:<34} {r['status']:<12} {plan:<12} "
            f"{r['when'] or '-':<30} {elapsed:>11}  {r['outcome']:<{width}}  {r['audit']}"
        )
        if r["headline"]:
            print(f"{'':<20} {'result: ' + r['headline']}")
        if r["rehearsals"]:
            print(f"{'':<20} rehearsed before approval: {describe_disclosures(r['rehearsals'])}")
        if r["amendment"]:
            print(f"{'':<20} amended plan: {describe_amendment(r['amendment'])}")
        if r["plan_superseded"]:
            print(
                f"{'':<20} plan superseded: the run's plan file holds other bytes now "
                "(prereg status groups the stage's runs by plan)"
            )
    _print_rehearsals(root)
    return 0


def _print_rehearsals(root: Path) -> None:
    """The rehearsals, apart from the runs: none of them is a run."""
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.records.runs import REHEARSAL_NOTE, all_rehearsals, rehearsals_dir

    found = all_rehearsals(root)
    if not found:
        return
    print(f"\nrehearsals under {rehearsals_dir(root).relative_to(root)}/ ({REHEARSAL_NOTE}):")
    print(f"{'stage':<20} {'rehearsal':<40} {'status':<12} {'items':>5}  uncommitted paths")
    for r in found:
        dirty = r.get("uncommitted_paths")
        print(
            f"{r.get('stage') or '?':<20} {r['name']:<40} {r['status']:<12} "
            f"{len(r.get('items') or []):>5}  {len(dirty) if isinstance(dirty, list) else '?'}"
        )


def cmd_status(args: argparse.Namespace) -> int:
    """``prereg status``: per stage, unspent approvals, next free run id, latest complete run,
    and which run consumed which."""
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.commands.status import project_status, render

    status = project_status(_root())
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    for line in render(status):
        print(line)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.commands.report.render import every_run, index_rows, write_index, write_report
    from prereg.kinds.report.model import ReportInputError

    audit = "none" if args.no_audit else "full" if args.full_audit else "cached"
    targets = [Path(p).resolve() for p in args.run_dir]
    if not targets and not args.all:
        raise SystemExit("prereg report: give runs/<run-id> (one or more), or --all")
    root = _run_root(targets[0]) if targets else _root()
    if args.all:
        targets = [record.path for record in every_run(root)]
    for target in targets:
        try:
            print(write_report(root, target, audit=audit))
        except (ReportInputError, FileNotFoundError) as err:
            print(f"prereg report: {err}", file=sys.stderr)
            return 2
    if args.all or args.index:
        print(write_index(root, index_rows(root, every_run(root), audit=audit)))
    return 0


def _run_root(path: Path) -> Path:
    """The repository holding a run folder (a report of another checkout's runs works)."""
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.kinds.stages import use_project_code

    try:
        root = gitrepo.toplevel(path if path.is_dir() else path.parent)
    except gitrepo.GitError:
        return _root()
    use_project_code(root)
    return root


def cmd_demo(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.commands.demo import run_demo

    return run_demo(_root(), keep=args.keep)


def cmd_init(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.commands.scaffold import (
        InitRefused,
        init_project,
        init_stage,
        next_steps,
        stage_next_steps,
    )

    folder = Path(args.folder).resolve()
    if args.requires is not None and args.stage is None:
        print("prereg init: refused: --requires OTHER needs --stage NAME", file=sys.stderr)
        return 2
    try:
        if args.stage is not None:
            print(stage_next_steps(init_stage(folder, args.stage, args.requires)))
            return 0
        written, initialised = init_project(folder)
    except InitRefused as err:
        print(f"prereg init: refused: {err}", file=sys.stderr)
        return 2
    print(next_steps(folder, written, initialised))
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.commands import signing
    from prereg.proof import keys

    try:
        if args.action == "runner":
            home = os.environ.get(gitrepo.USER_HOME) or os.environ.get("HOME")
            path = Path(args.key) if args.key else keys.runner_key_path(home=home)
            line, made = signing.runner_key(path)
            print(f"{'made' if made else 'runner key'}: {path}")
            print(
                f"its line for {keys.role_path(keys.RUNNERS)}: prereg keys add runners "
                f"NAME {path}.pub"
            )
            print(line)
            return 0
        if args.role is None or args.principal is None or args.public is None:
            print("prereg keys add: needs ROLE NAME KEY.pub", file=sys.stderr)
            return 2
        root = _root()
        before = [role for role in keys.ROLES if (root / keys.role_path(role)).exists()]
        line = signing.add_signer(root, args.role, args.principal, Path(args.public))
        made = [keys.role_path(r) for r in keys.ROLES if r not in before and r != args.role]
    except (signing.SigningRefused, keys.KeyProblem) as err:
        print(f"prereg keys: refused: {err}", file=sys.stderr)
        return 2
    for path in made:
        print(f"made {path} (empty: a role with no key yet)")
    print(f"added to {keys.role_path(args.role)}: {line}")
    print(
        f"commit it (git add {keys.ROLES_DIR} && git commit -S ...): after the card's freeze "
        "commit, a role file changes only in a commit an approver signs"
    )
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.commands import signing
    from prereg.proof.card import CardProblem

    try:
        text = signing.register(
            _root(),
            args.commit,
            witness=args.witness,
            timestamp_authority=args.timestamp_authority,
            timestamp_roots=args.timestamp_root,
        )
    except (signing.SigningRefused, CardProblem) as err:
        print(f"prereg register: refused: {err}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text)
        print(
            f"registration card written to {args.output}: publish it outside the repository "
            "(OSF, a registered report, mail to the approvers) before any run",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.commands import signing
    from prereg.proof.card import CardProblem, NotACard
    from prereg.proof.verify import COULD_NOT, REFUSED

    run_dir = Path(args.run_dir).absolute()
    root = Path(args.repo).absolute() if args.repo else None
    try:
        if not run_dir.is_dir():
            raise CardProblem(f"{args.run_dir} is not a run folder (runs/<run-id>)")
        root = root or gitrepo.toplevel(run_dir)
        verdict = signing.verify(root, run_dir, Path(args.card), require_audit=args.require_audit)
    except NotACard as err:
        print(f"verify {run_dir.name}: refused, 1 problem(s)\n  - {err}")
        return REFUSED
    except (CardProblem, gitrepo.GitError) as err:
        print(f"verify {run_dir.name}: could not verify\n  - {err}")
        return COULD_NOT
    print("\n".join(signing.describe(verdict)))
    return verdict.code


def cmd_witness(args: argparse.Namespace) -> int:
    # loaded by the command that uses it, so `prereg --help` stays light
    from prereg.proof.witness import WitnessProblem, init

    try:
        made = init(Path(args.path))
    except WitnessProblem as err:
        print(f"prereg witness: refused: {err}", file=sys.stderr)
        return 2
    print(f"witness made: {made.resolve()} (a bare repository; refs/prereg/* created once)")
    print(
        "host it where the operator cannot rewrite it; name it at approval: "
        f"prereg approve --witness {made.resolve()} ..."
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prereg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    approve = sub.add_parser("approve", help="write a one-run approval record from the clean HEAD")
    approve.add_argument("--stage", required=True)
    approve.add_argument(
        "--run-id",
        help="<stage>-YYYYMMDD-NNN (default: the stage's next free run id today, UTC; "
        "prereg status shows it)",
    )
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
        "--amend",
        metavar="WHY",
        help="why the plan differs from the one the stage's previous approval bound (required "
        "then; recorded in the approval with every changed field)",
    )
    approve.add_argument(
        "--witness",
        metavar="URL",
        help="a git remote the operator cannot rewrite (prereg witness init) that must take the "
        "run's start record before any item runs; a rerun under a spent approval is then "
        "refused by it, and prereg verify checks it",
    )
    approve.add_argument(
        "--timestamp-authority",
        metavar="URL",
        help="an RFC 3161 timestamp authority (the one the registration card names) that stamps "
        "this record now, the approval commit before the run starts and the attestation at its "
        "end: prereg verify then checks when each existed by the authority's clock",
    )
    approve.add_argument(
        "--accept-deviations",
        action="store_true",
        help="name this machine's deviations from the plan's environment pins in the record",
    )
    approve.set_defaults(func=cmd_approve)

    check = sub.add_parser(
        "validate-inputs",
        help="report every problem of a stage's inputs in one pass (writes nothing)",
        epilog=VALIDATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("--stage", required=True)
    check.add_argument(
        "--plan", help="plan file (default: the plan in pytest.ini naming the stage)"
    )
    check.add_argument(
        "--input", action="append", default=[], metavar="NAME=PATH", help="an input to check"
    )
    check.set_defaults(func=cmd_validate_inputs)

    audit = sub.add_parser(
        "audit",
        help="verify a run's hashes, records, git records and inputs, and replay it",
        epilog=AUDIT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    audit.add_argument("run_dir")
    audit.add_argument("--no-replay", action="store_true", help="hashes and records only")
    audit.add_argument(
        "--sign",
        action="store_true",
        help="also commit the run's SLSA verification summary, signed with your git signing key "
        "(a key of .prereg/auditors), as refs/prereg/runs/<run-id>/signed-audit",
    )
    audit.add_argument(
        "--signing-key",
        metavar="KEY",
        help="with --sign: the SSH private key to sign with (default: git's user.signingkey)",
    )
    audit.add_argument(
        "--repo",
        metavar="PATH",
        help="the git checkout the run was made in (default: the repository holding run_dir)",
    )
    audit.set_defaults(func=cmd_audit)

    runs = sub.add_parser(
        "runs",
        help="list the runs and refusals under runs/: status, elapsed, the items' outcome and "
        "the audit verdict of the records",
    )
    runs.add_argument("--json", action="store_true", help="one JSON list, for scripts")
    runs.add_argument(
        "--no-audit", action="store_true", help="skip the audit (the verdict column says so)"
    )
    runs.set_defaults(func=cmd_runs)

    status = sub.add_parser(
        "status",
        help="per stage: the unspent approvals (committed or not), the next free run id, the "
        "latest complete run, and which run consumed which",
    )
    status.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    status.set_defaults(func=cmd_status)

    report = sub.add_parser(
        "report", help="write a run's self-contained HTML report under runs/reports/"
    )
    report.add_argument(
        "run_dir", nargs="*", help="runs/<run-id>, or a refusal record runs/refusals/<name>.json"
    )
    report.add_argument(
        "--all", action="store_true", help="every run and refusal, and the index page"
    )
    report.add_argument("--index", action="store_true", help="also write runs/reports/index.html")
    how = report.add_mutually_exclusive_group()
    how.add_argument("--no-audit", action="store_true", help="do not audit (the page says so)")
    how.add_argument(
        "--full-audit",
        action="store_true",
        help="replay now even if an auditor signed a replayed verdict of this run (or, on the "
        "index page, prereg stored one)",
    )
    report.set_defaults(func=cmd_report)

    demo = sub.add_parser(
        "demo", help="run every stage end to end at demo scale in a scratch clone"
    )
    demo.add_argument("--keep", action="store_true", help="keep earlier demo clones")
    demo.set_defaults(func=cmd_demo)

    init = sub.add_parser(
        "init",
        help="lay out a new project: pytest.ini, plans/, experiments/, checks/, .gitignore",
    )
    init.add_argument("folder", nargs="?", default=".", help="the project's folder (default: here)")
    init.add_argument(
        "--stage",
        metavar="NAME",
        help="also write a working stage NAME (plan, a stage kind in the project's code, items, "
        "a software check); in an existing project, only those and the plan's pytest.ini line",
    )
    init.add_argument(
        "--requires",
        metavar="OTHER",
        help="with --stage, in an existing project: the stage decides from a run of stage OTHER "
        "(one item applying a rule to OTHER's summary); it joins OTHER's plan, so the rule is "
        "frozen before OTHER runs",
    )
    init.set_defaults(func=cmd_init)

    keys = sub.add_parser(
        "keys",
        help="the runner's signing key (runner), or a key added to a role file (add ROLE NAME KEY.pub)",
    )
    keys.add_argument("action", choices=("runner", "add"))
    keys.add_argument("role", nargs="?", choices=("approvers", "runners", "auditors"))
    keys.add_argument("principal", nargs="?", metavar="NAME", help="e.g. alice@lab")
    keys.add_argument("public", nargs="?", metavar="KEY.pub", help="an ssh-ed25519 public key file")
    keys.add_argument(
        "--key",
        help="runner: the private key file (default: $PREREG_RUNNER_KEY, else "
        "~/.config/prereg/runner_ed25519)",
    )
    keys.set_defaults(func=cmd_keys)

    register = sub.add_parser(
        "register", help="print the registration card to publish outside the repository"
    )
    register.add_argument("--commit", help="the freeze commit (default: HEAD of a clean tree)")
    register.add_argument("--output", "-o", help="write the card to this file")
    register.add_argument(
        "--witness", metavar="URL", help="the witness every approval must name (prereg witness)"
    )
    register.add_argument(
        "--timestamp-authority",
        metavar="URL",
        help="the RFC 3161 timestamp authority every approval must name (with --timestamp-root)",
    )
    register.add_argument(
        "--timestamp-root",
        metavar="PEM",
        action="append",
        default=[],
        help="a root certificate the authority's timestamps chain to (repeat for several)",
    )
    register.set_defaults(func=cmd_register)

    verify = sub.add_parser(
        "verify",
        help="check a run's signed chain from a registration card (0 verified, 1 refused, "
        "3 could not verify)",
    )
    verify.add_argument("run_dir", help="runs/<run-id>")
    verify.add_argument("--card", required=True, help="the registration card (JSON)")
    verify.add_argument("--repo", help="the repository (default: the one holding the run folder)")
    verify.add_argument(
        "--require-audit",
        action="store_true",
        help="also require a passing audit signed by a key of .prereg/auditors (prereg audit --sign)",
    )
    verify.set_defaults(func=cmd_verify)

    witness = sub.add_parser(
        "witness", help="make a witness for spent run ids: init PATH (a bare git repository)"
    )
    witness.add_argument("action", choices=("init",))
    witness.add_argument("path", help="the bare repository to make")
    witness.set_defaults(func=cmd_witness)
    return parser


# The exit status of a command whose reader closed the pipe (``prereg runs | head``): a
# shell reports 128 + SIGPIPE for a process SIGPIPE ended.
CLOSED_PIPE_EXIT = 128 + signal.SIGPIPE


def main(argv: list[str] | None = None) -> int:
    """Run one ``prereg`` command; a reader that stops reading (``| head``) ends it quietly
    with :data:`CLOSED_PIPE_EXIT`, without a traceback."""
    try:
        args = build_parser().parse_args(argv)
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # Python flushes standard output once more at exit: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return CLOSED_PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
