"""Spent run ids, single attempts and final manifests, recorded in git.

A run's folder is git-ignored and can be moved, deleted or edited; its record in git
cannot be changed without rewriting the repository's refs. When the gate passes, the
controller creates, in one atomic ref transaction whose expected old value is *none*:

- ``refs/prereg/runs/<run-id>/start``: a blob holding the bytes of ``start.json``;
- ``refs/prereg/single-attempt/<stage>``: the same blob, for a single-attempt stage.

So two simultaneous starts give one run (the loser's transaction fails and becomes a
recorded refusal), and a moved run folder or a removed approval cannot buy a second
run. At the end the controller records ``refs/prereg/runs/<run-id>/manifest`` (a blob
of ``manifest.json``'s bytes) the same way; the audit compares the run folder with it.

Each rehearsal is disclosed under ``refs/prereg/rehearsals/<stage>/<name>``
(:func:`disclose_rehearsal`): a blob of its disclosure, written when it starts and again
when it ends, so a deleted ``runs/rehearsals/`` or a clean checkout does not take it; the
next approval of the stage lists the stage's disclosures no earlier approval listed.

``git clone`` does not copy ``refs/prereg/*``: the gate asks every git remote whether it
records the run id or the stage's attempt (:func:`consult_remotes`), and a run pushes
its refs to each remote that answered (:func:`publish`), so a clone cannot spend again an
id its remote knows.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from prereg.base import gitrepo
from prereg.base.gitrepo import GitError
from prereg.records import documents

NAMESPACE = "refs/prereg"


class AlreadyRecorded(RuntimeError):
    """A ref that may be created once exists already (a spent run id, a used attempt)."""


def start_ref(run_id: str) -> str:
    return f"{NAMESPACE}/runs/{run_id}/start"


def manifest_ref(run_id: str) -> str:
    return f"{NAMESPACE}/runs/{run_id}/manifest"


def attestation_ref(run_id: str) -> str:
    """The run's signed statements (``runs/<run-id>/attestation.intoto.jsonl``), recorded once."""
    return f"{NAMESPACE}/runs/{run_id}/attestation"


def attestation_timestamp_ref(run_id: str) -> str:
    """The timestamp authority's token over the run's attestation, recorded once."""
    return f"{NAMESPACE}/runs/{run_id}/attestation-timestamp"


def signed_audit_ref(run_id: str) -> str:
    """The auditor's signed commit of the run's verification summary (prereg.proof.vsa): a
    commit whose parent is the run's source commit, never on a branch; created once."""
    return f"{NAMESPACE}/runs/{run_id}/signed-audit"


def attempt_ref(stage: str) -> str:
    return f"{NAMESPACE}/single-attempt/{stage}"


def source_ref(run_id: str) -> str:
    """The run's source commit, kept reachable: a deleted branch and ``git gc`` cannot take
    the code an audit replays."""
    return f"{NAMESPACE}/runs/{run_id}/source"


def verdict_ref(run_id: str) -> str:
    """The latest stored audit verdict of the run (its bytes): a verdict file that differs
    from it is not trusted (:mod:`prereg.records.verdicts`)."""
    return f"{NAMESPACE}/runs/{run_id}/verdict"


def rehearsal_ref(stage: str, name: str) -> str:
    return f"{NAMESPACE}/rehearsals/{stage}/{name}"


def _git(root: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess:
    return gitrepo.run(root, *args, data=data, check=False)


def _blob(root: Path, data: bytes) -> str:
    done = _git(root, "hash-object", "-w", "--no-filters", "--stdin", data=data)
    if done.returncode != 0:
        raise GitError(f"git hash-object failed in {root}: {done.stderr.decode().strip()}")
    oid = done.stdout.decode().strip()
    if oid != gitrepo.object_id("blob", data, gitrepo.object_format(root)):
        raise GitError(f"git hash-object in {root} named the record {oid}, not its blob id")
    return oid


def _create(root: Path, refs: list[str], data: bytes, others: dict[str, str] | None = None) -> None:
    """Create every ref in ``refs`` pointing at a blob of ``data``, and each ref of ``others``
    at the object it names, all or none."""
    targets = {**dict.fromkeys(refs, _blob(root, data)), **(others or {})}
    script = "".join(f"create {ref} {oid}\n" for ref, oid in targets.items()).encode()
    done = _git(root, "update-ref", "--stdin", data=script)
    if done.returncode != 0:
        taken = [
            ref for ref in targets if _git(root, "show-ref", "--verify", "-q", ref).returncode == 0
        ]
        if taken:
            raise AlreadyRecorded(f"already recorded in git: {', '.join(taken)}")
        raise GitError(f"git update-ref failed in {root}: {done.stderr.decode().strip()}")


def read(root: Path, ref: str) -> bytes | None:
    """The bytes of the blob ``ref`` points at, or None when the ref does not exist.

    The bytes are checked against the id the ref names (replace refs are ignored), so a
    rewritten object file or a ref moved onto another kind of object is a GitError."""
    found = _git(Path(root), "show-ref", "--verify", "--hash", "--", ref)
    if found.returncode != 0:
        return None
    oid = found.stdout.decode().strip()
    try:
        kind, data = gitrepo.read_object(Path(root), oid)
    except GitError as err:
        raise GitError(
            f"{ref} names object {oid}, which cannot be read back intact ({err}); the "
            "record in git was tampered with: restore it from a clone that has the ref"
        ) from None
    if kind != "blob":
        raise GitError(
            f"{ref} names a {kind} ({oid}), not the blob of a record; the record in git was "
            "tampered with: restore the ref from a clone that has it"
        )
    return data


def spend(
    root: Path,
    run_id: str,
    start_record: bytes,
    *,
    single_attempt_stage: str | None,
    source_commit: str | None = None,
) -> None:
    """Record that ``run_id`` started (and used its stage's one attempt), and pin its
    ``source_commit`` (:func:`source_ref`); atomic, once."""
    refs = [start_ref(run_id)]
    if single_attempt_stage is not None:
        refs.append(attempt_ref(single_attempt_stage))
    pinned = {source_ref(run_id): source_commit} if source_commit is not None else {}
    _create(Path(root), refs, start_record, pinned)


def record_manifest(root: Path, run_id: str, manifest: bytes) -> None:
    _create(Path(root), [manifest_ref(run_id)], manifest)


def record_attestation(root: Path, run_id: str, attestation: bytes) -> None:
    _create(Path(root), [attestation_ref(run_id)], attestation)


def record_attestation_timestamp(root: Path, run_id: str, reply: bytes) -> None:
    _create(Path(root), [attestation_timestamp_ref(run_id)], reply)


def record_verdict(root: Path, run_id: str, verdict: bytes) -> None:
    """Point :func:`verdict_ref` at a blob of ``verdict`` (a later audit moves it)."""
    ref = verdict_ref(run_id)
    done = _git(Path(root), "update-ref", ref, _blob(Path(root), verdict))
    if done.returncode != 0:
        raise GitError(f"git update-ref {ref} failed in {root}: {done.stderr.decode().strip()}")


def spent_run_ids(root: Path) -> list[str]:
    """Every run id whose start git records (``refs/prereg/runs/<run-id>/start``)."""
    done = _git(Path(root), "for-each-ref", "--format=%(refname)", f"{NAMESPACE}/runs/")
    if done.returncode != 0:
        return []
    return _started(done.stdout.decode().split())


def _started(refs) -> list[str]:
    """The run ids of the start refs among the ref names ``refs``."""
    prefix, suffix = f"{NAMESPACE}/runs/", "/start"
    return sorted(
        ref[len(prefix) : -len(suffix)]
        for ref in refs
        if ref.startswith(prefix) and ref.endswith(suffix)
    )


def disclose_rehearsal(root: Path, stage: str, name: str, disclosure: bytes) -> None:
    """Point :func:`rehearsal_ref` at a blob of ``disclosure`` (a rehearsal's record moves
    from running to its end; it is never removed by prereg)."""
    ref = rehearsal_ref(stage, name)
    done = _git(Path(root), "update-ref", ref, _blob(Path(root), disclosure))
    if done.returncode != 0:
        raise GitError(f"git update-ref {ref} failed in {root}: {done.stderr.decode().strip()}")


def rehearsal_disclosures(root: Path, stage: str) -> dict[str, bytes]:
    """The disclosure git records for each rehearsal of ``stage``, by rehearsal name."""
    prefix = rehearsal_ref(stage, "")
    done = _git(Path(root), "for-each-ref", "--format=%(refname)", prefix)
    if done.returncode != 0:
        raise GitError(f"git for-each-ref failed in {root}: {done.stderr.decode().strip()}")
    found = {}
    for ref in done.stdout.decode().split():
        data = read(Path(root), ref)
        if data is not None:
            found[ref[len(prefix) :]] = data
    return found


def pinned_source(root: Path, run_id: str) -> str | None:
    """The commit :func:`source_ref` pins for ``run_id``, or None (no such ref: a run made
    before the ledger pinned source commits)."""
    done = _git(Path(root), "show-ref", "--verify", "--hash", "--", source_ref(run_id))
    return done.stdout.decode().strip() if done.returncode == 0 else None


def is_spent(root: Path, run_id: str) -> bool:
    return read(Path(root), start_ref(run_id)) is not None


def attempt_run_id(root: Path, stage: str) -> str | None:
    """The run id that used a single-attempt stage's attempt, or None."""
    data = read(Path(root), attempt_ref(stage))
    if data is None:
        return None
    try:
        return documents.loads(data, attempt_ref(stage))["run_id"]
    except (ValueError, KeyError, TypeError):
        return "(unreadable start record)"


# How long one remote may take to answer before the gate goes on without it.
REMOTE_SECONDS = 20
# Settings of the repository's configuration that would run a program of its choosing when a
# remote is asked (a local remote's upload-pack or receive-pack, ssh's command) or wait for
# a password: fixed on the command line.
REMOTE_SAFE_CONFIG = ("core.sshCommand=ssh -o BatchMode=yes",)
REMOTE_PROGRAMS = ("--upload-pack=git-upload-pack", "--receive-pack=git-receive-pack")


@dataclass(frozen=True)
class RemoteLedger:
    """What one git remote's ledger says of a run id and its stage (``git ls-remote``).

    ``problem`` says why the remote could not be asked (None: it answered); ``spent``: it
    records the run id's start; ``attempt_used``: it records that another run used the
    stage's single attempt."""

    remote: str
    url: str = ""  # without a password or token it may hold
    spent: bool = False
    attempt_used: bool = False
    problem: str | None = None

    def record(self) -> dict:
        """As ``start.json`` keeps it (``remote_ledgers``)."""
        return {
            "remote": self.remote,
            "url": self.url,
            "consulted": self.problem is None,
            "problem": self.problem,
        }


def remotes(root: Path) -> list[str]:
    """The names of the repository's git remotes."""
    return _git(Path(root), "remote").stdout.decode("utf-8", "replace").split()


# Fetched beside a remote's branches, ``git fetch`` brings the records another clone pushed.
# No push refspec is set: one would replace what a plain ``git push`` pushes, and a run
# pushes its own records (:func:`publish`).
FETCH_REFSPEC = f"{NAMESPACE}/*:{NAMESPACE}/*"
FETCHES_RECORDS = (FETCH_REFSPEC, "refs/*:refs/*")  # the second: a mirror's fetch


def remotes_not_fetching_records(root: Path) -> list[str]:
    """The remotes whose configured fetch does not bring ``refs/prereg/*``."""
    missing = []
    for remote in remotes(root):
        done = _git(Path(root), "config", "--get-all", f"remote.{remote}.fetch")
        fetched = done.stdout.decode("utf-8", "replace").split()
        if not any(spec.lstrip("+") in FETCHES_RECORDS for spec in fetched):
            missing.append(remote)
    return missing


def fetch_records(root: Path) -> list[str]:
    """Add :data:`FETCH_REFSPEC` to each remote whose fetch lacks it; the remotes changed."""
    changed = []
    for remote in remotes_not_fetching_records(root):
        done = _git(Path(root), "config", "--add", f"remote.{remote}.fetch", FETCH_REFSPEC)
        if done.returncode != 0:
            raise GitError(
                f"git config --add remote.{remote}.fetch failed in {root}: "
                f"{done.stderr.decode().strip()}"
            )
        changed.append(remote)
    return changed


def remote_url(root: Path, remote: str, *, push: bool = False) -> str | None:
    """The url of ``remote`` (its push url), or None when git cannot name it."""
    done = _git(Path(root), "remote", "get-url", *["--push"] * push, "--", remote)
    return done.stdout.decode("utf-8", "replace").strip() if done.returncode == 0 else None


def shown_url(url: str) -> str:
    """``url`` without the password or token a ``scheme://user:secret@host`` url holds."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", url)


def _remote_git(
    root: Path, url: str | None, command: str, args: list[str], options: tuple[str, ...] = ()
) -> tuple[str, str | None]:
    """(output, None) of ``git command options -- url args``, or ("", why it failed): ``url``
    is a remote's (:func:`remote_url`; None: git could not name it); the user's own git
    configuration applies (credential helpers), the remote's program settings do not; no
    prompt, standard input closed, at most :data:`REMOTE_SECONDS`."""
    if url is None:
        return "", "git cannot name the remote's url"
    program = REMOTE_PROGRAMS[command == "push"]
    overrides = [part for setting in REMOTE_SAFE_CONFIG for part in ("-c", setting)]
    line = [*overrides, command, program, *options, "--", url, *args]
    try:
        done = subprocess.run(
            gitrepo.command(root, *line),
            capture_output=True,
            env=gitrepo.environment(user_config=True),
            stdin=subprocess.DEVNULL,
            timeout=REMOTE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "", f"it did not answer within {REMOTE_SECONDS} s"
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        said = [line for line in message if line.startswith(("fatal:", "error:", "remote:"))]
        if said:  # the first of git's own messages says why; the rest is advice
            return "", said[0]
        return "", message[-1] if message else f"git {command} exited {done.returncode}"
    return done.stdout.decode("utf-8", "replace"), None


def consult_remotes(root: Path, run_id: str, stage: str) -> tuple[RemoteLedger, ...]:
    """What every remote of the repository records of ``run_id`` and of ``stage``'s single
    attempt: ``git clone`` does not fetch ``refs/prereg/*``, so a clone's own ledger does not
    know a run id spent elsewhere."""
    start, attempt = start_ref(run_id), attempt_ref(stage)
    found = []
    for remote in remotes(root):
        url = remote_url(root, remote)
        listed, problem = _listed(Path(root), url, [start, attempt])
        shown = shown_url(url or "")
        if problem is not None:
            found.append(RemoteLedger(remote, shown, problem=problem))
            continue
        used = attempt in listed and listed[attempt] != listed.get(start)
        found.append(RemoteLedger(remote, shown, spent=start in listed, attempt_used=used))
    return tuple(found)


def remote_spent_run_ids(root: Path) -> dict[str, list[str] | str]:
    """Each remote -> the run ids whose start it records, or why it could not be asked."""
    found: dict[str, list[str] | str] = {}
    for remote in remotes(root):
        listed, problem = _listed(Path(root), remote_url(root, remote), [f"{NAMESPACE}/runs/*"])
        found[remote] = problem if problem is not None else _started(listed)
    return found


def _listed(root: Path, url: str | None, patterns: list[str]) -> tuple[dict[str, str], str | None]:
    """({ref: object id} of the refs matching ``patterns`` on ``remote``, None), or ({}, why
    it could not be asked)."""
    out, problem = _remote_git(root, url, "ls-remote", patterns)
    lines = (line.partition("\t") for line in out.splitlines())
    return {ref: oid for oid, _, ref in lines}, problem


def publish(root: Path, remote: str, refs: list[str]) -> str | None:
    """Push ``refs`` to ``remote``, creating them there (git never moves a remote ref that
    names a blob without force, so a ref the remote holds already stays); why it failed, or
    None."""
    refspecs = [f"{ref}:{ref}" for ref in refs]
    url = remote_url(root, remote, push=True)
    return _remote_git(Path(root), url, "push", refspecs, ("--quiet", "--no-verify"))[1]


def witnessed_start(root: Path, url: str, run_id: str) -> tuple[str | None, str | None]:
    """(the object id the witness at ``url`` holds as the run's start, None), or (None, why
    it could not be asked); (None, None): it holds none."""
    listed, problem = _listed(Path(root), url, [start_ref(run_id)])
    return listed.get(start_ref(run_id)), problem


def witness_start(root: Path, url: str, run_id: str) -> str | None:
    """Push the run's start record to the witness at ``url``; why it was refused, or None."""
    ref = start_ref(run_id)
    return _remote_git(Path(root), url, "push", [f"{ref}:{ref}"], ("--quiet", "--no-verify"))[1]
