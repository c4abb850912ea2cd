"""The records prereg writes and reads: their formats here, one definition for writer and
reader; the stores in the modules of this package: run folders and their paths
(:mod:`.runs`), the ledger of spent run ids (:mod:`.ledger`), the hermetic session's
snapshot folder (:mod:`.snapshot`) and audit verdicts (:mod:`.verdicts`).

Each record's format string, its schema (:mod:`prereg.base.schema`) and the vocabularies its
fields take (an item's outcome, an audit's verdict) live here; the modules that write a
record (:mod:`prereg.decisions.approval`, :mod:`prereg.decisions.manifest`,
:mod:`prereg.records.verdicts`, the rehearsal controller) and those that read it
(:mod:`prereg.decisions.audit`, the report, the status) use these definitions. The approval
record's place is :func:`approval_record`; the names of every file and folder under ``runs/`` (a
run folder, ``runs/audits/``, ``runs/refusals/``, a rehearsal) and the run id's form are here too,
and :mod:`prereg.records.runs` builds the paths from them. This module imports nothing of prereg
but :mod:`prereg.base.schema`.

The records:

- the approval record ``plans/approvals/<run-id>.json`` and its copy ``approval.json`` in the
  run folder: :data:`APPROVAL_FORMAT`, :class:`prereg.records.formats.Approval` (closed: no
  other field);
- the start record ``start.json``: :data:`START_FIELDS` (open: ``host`` and later fields are
  kept as they are);
- the manifest ``manifest.json``: :data:`MANIFEST_FORMAT`, :data:`MANIFEST_FIELDS`, plus
  :data:`COMPLETE_FIELDS` for a complete run and :data:`OPTIONAL_FIELDS`; a minimal manifest
  :data:`MINIMAL_FIELDS` and :data:`MINIMAL_MARKERS`; each item record (in the manifest and
  in ``items.jsonl``) :data:`ITEM_FIELDS` and :data:`ITEM_OPTIONAL_FIELDS` (open);
- the refusal record ``runs/refusals/<name>.json``: :data:`REFUSAL_SCHEMA`;
- the stored audit verdict ``runs/audits/<run-id>.json``: :data:`VERDICT_FORMAT`,
  :data:`VERDICT_SCHEMA`;
- the rehearsal record ``rehearsal.json`` and the rehearsal's ``approval.json`` (what an
  approval would bind, no approval): :data:`REHEARSAL_FORMAT`, :data:`REHEARSAL_SCHEMA`,
  :data:`REHEARSAL_BINDINGS_SCHEMA`;
- a rehearsal's disclosure, kept in git (``refs/prereg/rehearsals/<stage>/<name>``) and listed
  by the next approval of its stage: :data:`DISCLOSURE_FORMAT`, :data:`DISCLOSURE_SCHEMA`,
  made by :func:`rehearsal_disclosure`.
"""

from __future__ import annotations

import re

from prereg.base.schema import MapOf, NonNegativeFloat, NonNegativeInt, Nullable, OneOf, Optional

__all__ = [
    "APPROVALS_DIR",
    "APPROVAL_COPY",
    "APPROVAL_FORMAT",
    "ATTESTATION_FILES",
    "ATTESTATION_TIMESTAMP",
    "AUDITS_DIR",
    "CLEAN",
    "COMPLETE",
    "COMPLETE_FIELDS",
    "COULD_NOT_AUDIT",
    "CUSTOMIZE_FIELDS",
    "DISCLOSURE_FORMAT",
    "DISCLOSURE_SCHEMA",
    "DISTRIBUTION",
    "ERROR",
    "EXTENSION_ORIGIN",
    "FAILED",
    "FILE_ENTRY",
    "FINDINGS",
    "FINISHING_PHASES",
    "FROM_APPROVAL",
    "FROM_START",
    "HASH_LISTS",
    "INCOMPLETE",
    "INPUT_BINDING",
    "INTERRUPTED",
    "ITEMS_DIR",
    "ITEM_FIELDS",
    "ITEM_LOG",
    "ITEM_OPTIONAL_FIELDS",
    "JUNIT",
    "LOCK_SCHEMA",
    "MANIFEST",
    "MANIFEST_FIELDS",
    "MANIFEST_FORMAT",
    "MINIMAL_FIELDS",
    "MINIMAL_MARKERS",
    "NOT_RUN",
    "OPTIONAL_FIELDS",
    "OUTCOMES",
    "PASSED",
    "PROGRESS_DIR",
    "PYTHON_FIELDS",
    "REFUSALS_DIR",
    "REFUSAL_SCHEMA",
    "REHEARSALS_DIR",
    "REHEARSAL_BINDINGS_SCHEMA",
    "REHEARSAL_FORMAT",
    "REHEARSAL_NAME_PATTERN",
    "REHEARSAL_PROGRESS",
    "REHEARSAL_RECORD",
    "REHEARSAL_SCHEMA",
    "REPORTS_DIR",
    "REQUIRED_RUN",
    "RUNS_DIR",
    "RUN_ID_PATTERN",
    "SKIPPED",
    "STAGE_NAME",
    "START_FIELDS",
    "START_RECORD",
    "SUMMARY_DIR",
    "UNKNOWN",
    "VERDICTS",
    "VERDICT_FORMAT",
    "VERDICT_SCHEMA",
    "approval_record",
    "describe_amendment",
    "describe_disclosures",
    "item_outcomes",
    "passed_whole_stage",
    "rehearsal_disclosure",
]

# -- the names under runs/ and the run id's form (paths built by prereg.records.runs) ---------

# A stage's name, and a run id ``<stage>-YYYYMMDD-NNN``. ASCII only, the whole string:
# ``[0-9]`` (``\d`` also matches digits such as '٣') and ``\A``/``\Z`` (``$`` also matches
# before a trailing newline), so ``match`` and ``fullmatch`` both test the whole id.
STAGE_NAME = r"[a-z][a-z0-9-]*"
RUN_ID_PATTERN = re.compile(
    rf"\A(?P<stage>{STAGE_NAME})-(?P<date>[0-9]{{8}})-(?P<seq>[0-9]{{3}})\Z"
)
# A rehearsal's folder name, ``<stage>-YYYYMMDDTHHMMSSZ[-N]``.
REHEARSAL_NAME_PATTERN = re.compile(rf"\A{STAGE_NAME}-[0-9]{{8}}T[0-9]{{6}}Z(-[0-9]+)?\Z")

RUNS_DIR = "runs"  # beside plans/, git-ignored
# In a run folder ``runs/<run-id>/`` (a rehearsal's folder holds the same but START_RECORD
# and MANIFEST, and has REHEARSAL_RECORD and REHEARSAL_PROGRESS).
START_RECORD = "start.json"
MANIFEST = "manifest.json"
ITEM_LOG = "items.jsonl"
JUNIT = "junit.xml"
APPROVAL_COPY = "approval.json"
# The run's signed in-toto statements (prereg.proof), written last: it covers every other file.
ATTESTATION = "attestation.intoto.jsonl"
# The timestamp authority's token over the attestation (prereg.proof.timestamp), written after it.
ATTESTATION_TIMESTAMP = "attestation.tsr"
# Written after the manifest and over it: no manifest lists them, no statement's subject.
ATTESTATION_FILES = (ATTESTATION, ATTESTATION_TIMESTAMP)
ITEMS_DIR = "items"
SUMMARY_DIR = "summary"
REHEARSAL_RECORD = "rehearsal.json"
REHEARSAL_PROGRESS = "progress.log"
# Beside the run folders, in runs/.
REFUSALS_DIR = "refusals"  # <name>.json
PROGRESS_DIR = "progress"  # <run-id>.log and <run-id>.reserve
AUDITS_DIR = "audits"  # <run-id>.json
REPORTS_DIR = "reports"  # <run-id>.html and index.html
REHEARSALS_DIR = "rehearsals"  # <rehearsal name>/

# -- where approval records are ----------------------------------------------------------------

# Approval records, committed: ``plans/approvals/<run-id>.json`` (relative to the checkout).
APPROVALS_DIR = "plans/approvals"
# Signed audits, committed by the auditor: audits/<run-id>.vsa.json (prereg.proof.vsa).
SIGNED_AUDITS_DIR = "audits"


def approval_record(run_id: str) -> str:
    """``plans/approvals/<run-id>.json``: the approval record of ``run_id``, relative to the
    checkout and with ``/`` separators, as git, the manifest, the audit and the gate name it.
    The run id is not checked here (a record names the id it holds); build a file path with
    :func:`prereg.decisions.approval.approval_path`, which checks it first."""
    return f"{APPROVALS_DIR}/{run_id}.json"


def signed_audit_record(run_id: str) -> str:
    """``audits/<run-id>.vsa.json``: the auditor's verification summary of the run, relative
    to the checkout, committed in a commit the auditor signs."""
    return f"{SIGNED_AUDITS_DIR}/{run_id}.vsa.json"


# -- a manifest's status -----------------------------------------------------------------------

COMPLETE = "complete"
INCOMPLETE = "incomplete"

# -- item outcomes -----------------------------------------------------------------------------

# The outcome the controller gives an item (prereg.runtime.items.outcome, from its phases).
PASSED = "passed"
FAILED = "failed"  # its call failed
ERROR = "error"  # its setup or teardown failed
SKIPPED = "skipped"
INTERRUPTED = "interrupted"  # it started (a report or an output folder) and did not finish
NOT_RUN = "not run"  # no report came and it left no output folder
UNKNOWN = "unknown"  # a folder under items/ that no item of the run claims, recorded with its files
OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED, INTERRUPTED, NOT_RUN, UNKNOWN)
# Phases whose report makes the controller append the item to items.jsonl ("???": xdist's
# report for an item whose worker crashed).
FINISHING_PHASES = ("teardown", "???")

# -- shared parts ------------------------------------------------------------------------------

# A hashed file (the manifest's run, summary and item output files): path relative to its folder.
FILE_ENTRY = {"path": str, "sha256": str, "bytes": NonNegativeInt}
# A bound input (approval, manifest, rehearsal): a file by SHA-256, a git repository by commit.
INPUT_BINDING = {"path": str, "kind": str, "sha256": Nullable(str), "commit": Nullable(str)}
# A required run an approval binds: its run id and the SHA-256 of its manifest.
REQUIRED_RUN = {"run_id": str, "manifest_sha256": str}
# Where an installed entry came from (approval records, manifests): field -> type.
EXTENSION_ORIGIN = {"distribution": str, "entry_point": str, "file": str, "record_sha256": str}

# The interpreter fields of an environment lock (prereg.evidence.envlock).
PYTHON_FIELDS = (
    "executable",
    "executable_sha256",
    "version",
    "implementation",
    "prefix",
    "base_prefix",
)
# The modules Python's site runs at every start (sitecustomize, usercustomize): the SHA-256 of
# each as found in the interpreter's standard library and site folders, "" when there is
# none. Optional: a lock made before they were bound lacks them, and they are then not
# compared.
CUSTOMIZE_FIELDS = ("sitecustomize_sha256", "usercustomize_sha256")
# One installed distribution of an environment lock.
DISTRIBUTION = {
    "version": str,
    "record_sha256": str,
    "files": NonNegativeInt,
    "entries": Optional(MapOf(str)),
}
# The shape of a lock (the approval's ``environment_lock``, the manifest's record of it).
LOCK_SCHEMA = {
    "python": {
        **{name: str for name in PYTHON_FIELDS},
        **{name: Optional(str) for name in CUSTOMIZE_FIELDS},
    },
    "distributions": MapOf(DISTRIBUTION),
}

# -- the approval record -----------------------------------------------------------------------

APPROVAL_FORMAT = "prereg-approval-1"

# What git keeps of each rehearsal, whatever happens to its folder: when, which plan and
# tree, how much of the stage, and whether a summary was written (the outcome was shown).
DISCLOSURE_FORMAT = "prereg-rehearsal-disclosure/1"
DISCLOSURE_SCHEMA = {
    "format": str,
    "stage": str,
    "name": str,
    "status": OneOf(("running", "passed", "failed")),
    "started_at": str,
    "ended_at": Nullable(str),
    "head_commit": Nullable(str),
    "tree": Nullable(str),
    "uncommitted_paths": NonNegativeInt,
    "plan": {"path": str, "sha256": str},
    "scale": Nullable(MapOf(object)),  # the rehearsal_parameters it ran with (None: the plan's)
    "selection": Nullable(str),
    "items_selected": NonNegativeInt,
    "summary_files": NonNegativeInt,
    # why a run would be refused where the rehearsal was not (an option, -p, -o of its command
    # line; code its execution check refuses): such a rehearsal predicts nothing of the run
    # (absent: a rehearsal made before it was said)
    "run_would_refuse": Optional([str]),
}


def item_outcomes(items) -> list[tuple[str, object]]:
    """(node id, outcome) of each item record of a manifest's ``items`` that names its node."""
    return [(i["nodeid"], i.get("outcome")) for i in items if isinstance(i, dict) and "nodeid" in i]


def passed_whole_stage(record: dict) -> bool:
    """A rehearsal (its record or disclosure) that passed over every item of its stage with
    a command line a run would take: one an approval's tree may have been tried by, and a
    rehearsal of a stage requiring it may read."""
    return (
        record.get("status") == "passed"
        and record.get("selection") is None
        and not record.get("run_would_refuse")
    )


def rehearsal_disclosure(record: dict) -> dict:
    """The disclosure (:data:`DISCLOSURE_SCHEMA`) of a rehearsal record
    (:data:`REHEARSAL_SCHEMA`)."""
    return {
        "format": DISCLOSURE_FORMAT,
        **{field: record.get(field) for field in DISCLOSURE_SCHEMA if field != "format"},
        "uncommitted_paths": len(record["uncommitted_paths"]),
        "scale": (record.get("scale") or {}).get("parameters"),
        "summary_files": len(record["summary_files"]),
    }


def describe_disclosures(disclosures: list[dict] | None) -> str:
    """One line on the rehearsals an approval disclosed (None: it predates the list)."""
    if disclosures is None:
        return "not recorded (an approval made before approvals listed rehearsals)"
    if not disclosures:
        return "none"
    passed = sum(d["status"] == "passed" for d in disclosures)
    whole = sum(d["selection"] is None for d in disclosures)
    summaries = sum(d["summary_files"] > 0 for d in disclosures)
    plans = len({d["plan"]["sha256"] for d in disclosures})
    return (
        f"{len(disclosures)} ({passed} passed; {whole} of the whole stage; {summaries} wrote a "
        f"summary; under {plans} plan version{'s' if plans != 1 else ''})"
    )


def describe_amendment(amended: dict | None) -> str:
    """One line on an approval's amendment (None: the plan was its previous approval's)."""
    if amended is None:
        return "none (the plan its stage's previous approval bound, or its first approval)"
    fields = ", ".join(c["field"] for c in amended["changed"]) or "none"
    return (
        f"the plan changed since {amended['previous_approval']} (plan SHA-256 "
        f"{amended['previous_plan_sha256'][:12]}): {fields}; why: {amended['reason']}; complete "
        f"runs under another plan by then: {len(amended['complete_runs_before'])}"
    )


# The approval record's shape is its class, prereg.records.formats.Approval (closed: no other
# field); its format string is here.

# -- the start record --------------------------------------------------------------------------

START_FIELDS = {
    "stage": str,
    "run_id": str,
    "started_at": str,
    "source_commit": str,
    "plan_sha256": str,
    "approval_sha256": str,
}

# -- the manifest ------------------------------------------------------------------------------

MANIFEST_FORMAT = "prereg-manifest-1"
# The manifest's lists of hashed files.
HASH_LISTS = ("run_files", "summary_files", "partial_summary_files")
# Fields every manifest has (open: fields added later are not findings).
MANIFEST_FIELDS = {
    "format": str,
    "stage": str,
    "run_id": str,
    "status": OneOf((COMPLETE, INCOMPLETE)),
    "incomplete_reasons": [str],
    "source_commit": str,
    "source_anchor": str,
    "plan": {"path": str, "sha256": str},
    "approval": {"path": str, "sha256": str},
    "baseline_sha256": str,
    "seed_namespace": Nullable(str),
    "deviations": [dict],
    "requires": MapOf(dict),
    "inputs": MapOf(dict),
    "expected_items": NonNegativeInt,
    "items": [dict],
    "run_files": [FILE_ENTRY],
    "summary_files": [FILE_ENTRY],
}
# Fields a complete run's manifest has; a minimal manifest written after a crash may lack them.
COMPLETE_FIELDS = {
    "environment": dict,
    "workers": NonNegativeInt,
    "started_at": str,
    "ended_at": str,
    "elapsed_seconds": NonNegativeFloat,
    "budget": dict,
}
OPTIONAL_FIELDS = {"partial_summary_files": [FILE_ENTRY]}
# A minimal manifest (``"minimal": true``), written when the full one could not be: always
# incomplete, holding what the start record and the run folder tell for sure.
MINIMAL_FIELDS = {
    "format": str,
    "stage": str,
    "run_id": str,
    "status": OneOf((INCOMPLETE,)),
    "incomplete_reasons": [str],
    "source_commit": Nullable(str),
    "plan": {"path": Nullable(str), "sha256": Nullable(str)},
    "approval": {"path": str, "sha256": Nullable(str)},
    "expected_items": NonNegativeInt,
    "items": [dict],
    "run_files": [FILE_ENTRY],
    "summary_files": [FILE_ENTRY],
}
# What marks a minimal manifest, and names the failure of the full one.
MINIMAL_MARKERS = {"minimal": OneOf((True,)), "manifest_error": str}
# An item's record (each of the manifest's ``items``, each line of ``items.jsonl``); open.
ITEM_FIELDS = {"nodeid": str, "outcome": OneOf(OUTCOMES), "phases": MapOf(str)}
ITEM_OPTIONAL_FIELDS = {"output_dir": str, "outputs": [FILE_ENTRY]}
# The approval's fields the manifest repeats: manifest field -> approval field path.
FROM_APPROVAL = {
    "stage": ("stage",),
    "run_id": ("run_id",),
    "deviations": ("deviations",),
    "seed_namespace": ("seed_namespace",),
    "requires": ("requires",),
    "inputs": ("inputs",),
    "source_anchor": ("source_anchor",),
    "baseline_sha256": ("baseline", "sha256"),
    "plan.path": ("plan", "path"),
    "plan.sha256": ("plan", "sha256"),
}
# start.json field -> manifest field.
FROM_START = {
    "stage": "stage",
    "run_id": "run_id",
    "started_at": "started_at",
    "source_commit": "source_commit",
    "plan_sha256": "plan.sha256",
    "approval_sha256": "approval.sha256",
}

# -- the refusal record ------------------------------------------------------------------------

REFUSAL_SCHEMA = {
    "stage": str,
    "run_id": Nullable(str),
    "approval": Nullable(str),  # the approval record, relative to the checkout
    "refused_at": str,
    "head": Nullable(str),  # None when git cannot answer
    "refusals": [{"condition": str, "message": str}],
}

# -- the stored audit verdict ------------------------------------------------------------------

VERDICT_FORMAT = "prereg-audit-verdict/2"
CLEAN = "clean"
FINDINGS = "findings"
COULD_NOT_AUDIT = "could not audit"
VERDICTS = (CLEAN, FINDINGS, COULD_NOT_AUDIT)
VERDICT_SCHEMA = {
    "format": str,
    "run_id": str,
    "manifest_sha256": str,
    "code": {"package_sha256": str, "source_commit": Nullable(str), "source_dirty": Nullable(bool)},
    "verdict": OneOf(VERDICTS),
    "findings": [str],
    "blockers": [str],
    "replayed": bool,
    "replay_note": str,
    "status": Nullable(str),  # the status the manifest claims
    "audited_at": str,
}

# -- the rehearsal record ----------------------------------------------------------------------

REHEARSAL_FORMAT = "prereg-rehearsal/1"
REHEARSAL_SCHEMA = {
    "format": str,
    "rehearsal": str,
    "stage": str,
    "name": str,
    "status": OneOf(("running", "passed", "failed")),
    "reasons": [str],
    "head_commit": Nullable(str),
    "uncommitted_paths": [str],
    # the working tree's id (gitrepo.working_tree_id): what was rehearsed, uncommitted edits too
    "tree": Optional(Nullable(str)),
    "plan": {"path": str, "sha256": str},
    # at the plan's rehearsal scale: the plan read, and the rehearsal_parameters put in place
    "scale": Optional(Nullable({"plan": {"path": str, "sha256": str}, "parameters": dict})),
    "inputs": Nullable(MapOf(INPUT_BINDING)),
    "required_runs": Nullable(MapOf(str)),  # stage -> run id
    "arguments": [str],
    "workers": NonNegativeInt,
    "started_at": str,
    "ended_at": Nullable(str),  # None while it runs
    "elapsed_seconds": NonNegativeFloat,
    "items_selected": NonNegativeInt,
    "selection": Nullable(str),
    "run_would_refuse": Optional([str]),  # as in DISCLOSURE_SCHEMA
    "summary_note": Nullable(str),
    "items": [dict],
    "summary_files": [FILE_ENTRY],
}
REHEARSAL_BINDINGS_SCHEMA = {
    "rehearsal": str,
    "stage": str,
    "plan": {"path": str, "sha256": str},
    "scale": Optional(Nullable(dict)),  # the rehearsal_parameters in place (None: none)
    "seed_namespace": Nullable(str),
    "inputs": Nullable(MapOf(INPUT_BINDING)),
    "requires": MapOf(REQUIRED_RUN),
}
