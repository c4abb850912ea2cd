"""Records as frozen classes, read at one door: :func:`load` and :func:`loads` parse a record's
bytes as JSON strictly (:mod:`prereg.records.documents`) and then as its class
(:func:`prereg.base.typed_settings.parse_as`), and return a :class:`Read` holding the value,
the exact bytes and their SHA-256. A record that is not JSON as prereg reads it raises
:class:`~prereg.records.documents.NotJson`; one of another shape :class:`NotARecord`, naming
the field.

The classes follow the schemas of :mod:`prereg.records` field for field, so that every
record prereg ever wrote still loads: a part whose shape a later version may widen (an
environment lock, an extension's origin, a rehearsal's disclosure) is kept as its JSON data,
which the schema in :mod:`prereg.records` still judges where it is written. The statements an
attestation signs are open records: a verifier reads the fields it judges and keeps the rest
(the plain commands' jq reads them the same way).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from prereg.base.typed_settings import ABSENT, SettingsError, absent, named, parse_as, rest
from prereg.records import documents

T = TypeVar("T")


class NotARecord(ValueError):
    """JSON that is not the record it should be; the message names where and which field."""


@dataclass(frozen=True)
class Read(Generic[T]):
    """A record as read: its value, its exact bytes and their SHA-256."""

    value: T
    data: bytes
    sha256: str


def loads(data: bytes, kind: type[T], where: str) -> Read[T]:
    """The record ``kind`` in ``data`` (named ``where`` in an error)."""
    value = documents.loads(data, where)
    try:
        parsed = parse_as(kind, value, path="")
    except SettingsError as err:
        raise NotARecord(f"{where} is not a valid {kind.__name__} record: {err}") from None
    return Read(parsed, data, hashlib.sha256(data).hexdigest())


def load(path: Path, kind: type[T], where: str | None = None) -> Read[T]:
    """:func:`loads` of the file at ``path`` (an OSError when it cannot be read)."""
    return loads(Path(path).read_bytes(), kind, where or str(path))


# -- the approval record ------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanRef:
    path: str
    sha256: str
    plan_id: str


@dataclass(frozen=True)
class FileRef:
    path: str
    sha256: str


@dataclass(frozen=True)
class Witness:
    url: str


@dataclass(frozen=True)
class Stamp:
    url: str
    token: str


@dataclass(frozen=True)
class RequiredRun:
    run_id: str
    manifest_sha256: str


@dataclass(frozen=True)
class InputBinding:
    path: str
    kind: str
    sha256: str | None
    commit: str | None


@dataclass(frozen=True)
class LockedPython:
    executable: str
    executable_sha256: str
    version: str
    implementation: str
    prefix: str
    base_prefix: str
    sitecustomize_sha256: str = absent()
    usercustomize_sha256: str = absent()


@dataclass(frozen=True)
class Distribution:
    version: str
    record_sha256: str
    files: int
    entries: dict[str, str] = absent()


@dataclass(frozen=True)
class EnvironmentLock:
    """An environment lock (:data:`prereg.records.LOCK_SCHEMA`)."""

    python: LockedPython
    distributions: dict[str, Distribution]


@dataclass(frozen=True)
class Approval:
    """The approval record ``plans/approvals/<run-id>.json``
    (closed: no other field; the only definition of its shape)."""

    format: str
    stage: str
    run_id: str
    plan: PlanRef
    baseline: FileRef
    source_anchor: str
    seed_namespace: str | None
    environment: dict[str, Any]
    deviations: tuple[Any, ...]
    requires: dict[str, RequiredRun]
    inputs: dict[str, InputBinding]
    approved_at: str
    approved_by: str
    extensions: dict[str, Any] = absent()
    environment_lock: EnvironmentLock = absent()
    witness: Witness = absent()
    timestamp: Stamp = absent()
    rehearsals: tuple[dict[str, Any], ...] = absent()
    amendment: dict[str, Any] = absent()


# -- the start record ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """A run's ``start.json`` (:data:`prereg.records.START_FIELDS`; open: ``host`` and later
    fields are kept as read)."""

    stage: str
    run_id: str
    started_at: str
    source_commit: str
    plan_sha256: str
    approval_sha256: str
    approval_timestamp: str = absent()
    other: dict[str, Any] = rest()


# -- the manifest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    """A run's ``manifest.json``, read for what the attestation states of it (open: its
    schema in :mod:`prereg.records` is the audit's)."""

    status: str = absent()
    workers: int = absent()
    ended_at: str | None = absent()
    environment: dict[str, Any] = absent()
    items: tuple[Any, ...] = absent()
    other: dict[str, Any] = rest()

    @property
    def execution(self) -> dict[str, Any]:
        return (self.environment or {}).get("execution") or {}

    @property
    def snapshot(self) -> Any:
        return (self.environment or {}).get("snapshot")


# -- the registration card ----------------------------------------------------------------------


@dataclass(frozen=True)
class Authority:
    url: str
    roots: tuple[str, ...]


@dataclass(frozen=True)
class Card:
    """A registration card (:mod:`prereg.proof.card`; closed)."""

    format: str
    repository: str
    freeze_commit: str
    plans: dict[str, str]
    roles: dict[str, str]
    witness: str = absent()
    timestamp_authority: Authority = absent()


# -- the statements of an attestation ----------------------------------------------------------


@dataclass(frozen=True)
class Dependency:
    """A resource descriptor (in-toto ResourceDescriptor v1): the fields prereg reads."""

    name: str = absent()
    digest: dict[str, str] = absent()
    other: dict[str, Any] = rest()


@dataclass(frozen=True)
class BuildDefinition:
    build_type: str = named("buildType")
    external: dict[str, Any] = named("externalParameters")
    dependencies: tuple[Dependency, ...] = named("resolvedDependencies")
    other: dict[str, Any] = rest()

    @property
    def run_id(self) -> Any:
        return self.external.get("runId")

    @property
    def stage(self) -> Any:
        return self.external.get("stage")

    def digest(self, name: str) -> dict[str, str]:
        """The digest of the first dependency named ``name`` (empty when none is)."""
        for dep in self.dependencies:
            if dep.name == name:
                return dep.digest or {}
        return {}


@dataclass(frozen=True)
class Metadata:
    invocation_id: str = named("invocationId")
    started_on: str | None = named("startedOn", default=ABSENT)
    finished_on: str | None = named("finishedOn", default=ABSENT)
    other: dict[str, Any] = rest()


@dataclass(frozen=True)
class RunDetails:
    metadata: Metadata
    other: dict[str, Any] = rest()


@dataclass(frozen=True)
class ProvenancePredicate:
    build: BuildDefinition = named("buildDefinition")
    run: RunDetails = named("runDetails")
    other: dict[str, Any] = rest()


@dataclass(frozen=True)
class Statement:
    """An in-toto Statement v1 (open: the predicate is read by the class that judges it)."""

    type: str = named("_type")
    subject: tuple[dict[str, Any], ...] = ()
    predicate_type: str = named("predicateType", default="")
    predicate: Any = ABSENT
    other: dict[str, Any] = rest()


@dataclass(frozen=True)
class Provenance(Statement):
    """Line 1 of an attestation: a Statement v1 with the SLSA Provenance v1 predicate."""

    predicate: ProvenancePredicate = ABSENT


@dataclass(frozen=True)
class SummaryPredicate:
    """A SLSA Verification Summary v1 predicate: the fields a verifier judges, read as loosely
    as the plain commands' jq reads them."""

    resource_uri: Any = named("resourceUri")
    input_attestations: Any = named("inputAttestations")
    result: Any = named("verificationResult")
    levels: Any = named("verifiedLevels", default=ABSENT)
    time_verified: Any = named("timeVerified", default=ABSENT)
    other: dict[str, Any] = rest()

    @property
    def level_list(self) -> list:
        """The verified levels when they are a list (as jq's ``arrays`` reads them), else none."""
        return self.levels if isinstance(self.levels, (list, tuple)) else []

    @property
    def attested_sha256(self) -> Any:
        """The SHA-256 of the first input attestation (a KeyError, IndexError or TypeError
        when it names none)."""
        return self.input_attestations[0]["digest"]["sha256"]


@dataclass(frozen=True)
class Summary:
    """A signed audit's ``audits/<run-id>.vsa.json``: a Statement v1 with the summary."""

    predicate: SummaryPredicate
    type: Any = named("_type", default=ABSENT)
    subject: Any = ()
    predicate_type: Any = named("predicateType", default=ABSENT)
    other: dict[str, Any] = rest()

    def subject_digest(self, name: str) -> Any:
        subjects = self.subject if isinstance(self.subject, list) else []
        named_so = (s for s in subjects if isinstance(s, dict) and s.get("name") == name)
        return next((s.get("digest") for s in named_so), None)


__all__ = [
    "ABSENT",
    "Approval",
    "Card",
    "EnvironmentLock",
    "Manifest",
    "NotARecord",
    "Provenance",
    "Read",
    "Start",
    "Statement",
    "Summary",
    "load",
    "loads",
]
