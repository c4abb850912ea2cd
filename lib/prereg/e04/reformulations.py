"""The E02 query reformulations that H010 searches instead of the task query.

Artifact format (JSON, UTF-8)::

    {"code_revision": "<40-hex git sha of the E02 code>",     # required
     "synthetic": false,                                      # optional bool, default false
     "reformulations": {"<task_id>": "<reformulated query>", ...}}   # required

``synthetic`` is true for stand-in artifacts made for demos and tests; a
research plan refuses them (``allow_synthetic = false``). As in the task file
(:mod:`prereg.e04.tasks`), it is optional and absent means false: one rule for both
files. Every problem of an artifact is reported at once
(:func:`reformulation_problems`); the fields are tabled in docs/how-to/e04-inputs.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

_REVISION = re.compile(r"[0-9a-f]{40}")
_REQUIRED = ("code_revision", "reformulations")
_OPTIONAL = ("synthetic",)
_FIELDS = {*_REQUIRED, *_OPTIONAL}


class ReformulationArtifactError(ValueError):
    """The reformulation artifact is malformed, from another revision, or incomplete."""


@dataclass(frozen=True)
class Reformulations:
    """Validated reformulations: ``texts`` maps task id to reformulated query.

    ``sha256`` is the SHA-256 of the artifact's bytes (``None`` when built from
    an object), for the manifest.
    """

    code_revision: str
    synthetic: bool
    texts: Mapping[str, str]
    sha256: str | None

    def for_task(self, task_id: str) -> str:
        """The reformulation of ``task_id``; refuses a task without one."""
        if task_id not in self.texts:
            raise ReformulationArtifactError(
                f"no E02 reformulation for task {task_id!r} (revision {self.code_revision})"
            )
        return self.texts[task_id]


def reformulations_from_json(
    document: Any,
    *,
    expected_code_revision: str,
    task_ids: Sequence[str],
    allow_synthetic: bool,
    source: str = "reformulation artifact",
    sha256: str | None = None,
) -> Reformulations:
    """Validate a parsed artifact against the plan.

    Parameters
    ----------
    document : object
        The parsed JSON.
    expected_code_revision : str
        The E02 code revision the plan names (40 lowercase hex digits).
    task_ids : sequence of str
        Every task that needs a reformulation; each must have a non-empty one.
    allow_synthetic : bool
        Whether a ``"synthetic": true`` artifact is accepted (demo plans only).
    source : str
        How errors name the artifact (its path).
    sha256 : str, optional
        Hash of the artifact's bytes, carried into the result.
    """
    problems = reformulation_problems(
        document,
        expected_code_revision=expected_code_revision,
        task_ids=task_ids,
        allow_synthetic=allow_synthetic,
        source=source,
    )
    if problems:
        error = ReformulationArtifactError(
            problems[0]
            if len(problems) == 1
            else f"{len(problems)} problems:\n" + "\n".join(problems)
        )
        error.problems = tuple(problems)
        raise error
    revision = document["code_revision"]
    synthetic = document.get("synthetic", False)
    texts = document["reformulations"]
    return Reformulations(
        code_revision=revision,
        synthetic=synthetic,
        texts=MappingProxyType({task_id: texts[task_id] for task_id in task_ids}),
        sha256=sha256,
    )


def reformulation_problems(
    document: Any,
    *,
    expected_code_revision: str,
    task_ids: Sequence[str] | None,
    allow_synthetic: bool,
    source: str = "reformulation artifact",
) -> list[str]:
    """Every problem of a parsed artifact, one sentence each naming the file and field.

    ``task_ids`` None skips the completeness check (the task file could not be read).
    Empty: :func:`reformulations_from_json` accepts it.
    """
    if not isinstance(expected_code_revision, str) or not _REVISION.fullmatch(
        expected_code_revision
    ):
        return [
            f"expected_code_revision={expected_code_revision!r} must be 40 lowercase hex digits"
        ]
    if not isinstance(document, dict):
        return [f"{source}: top level must be an object"]
    problems = []
    unknown = sorted(set(document) - _FIELDS, key=str)
    missing = [k for k in _REQUIRED if k not in document]
    if unknown or missing:
        problems.append(
            f"{source}: fields {sorted(document, key=str)}; expected exactly "
            f"{list(_REQUIRED)} and optionally {list(_OPTIONAL)}"
            + (f"; unknown {unknown}" if unknown else "")
            + (f"; missing {missing}" if missing else "")
        )
    revision = document.get("code_revision")
    if "code_revision" in document and revision != expected_code_revision:
        problems.append(
            f"{source}: field 'code_revision': comes from E02 code revision {revision!r}; the "
            f"plan requires {expected_code_revision!r}. Use the artifact of the completed E02 "
            "model phase."
        )
    synthetic = document.get("synthetic", False)
    if not isinstance(synthetic, bool):
        problems.append(f"{source}: synthetic={synthetic!r} must be true or false")
    elif synthetic and not allow_synthetic:
        problems.append(
            f"{source} is synthetic (a stand-in; field 'synthetic': true); this plan requires "
            "the real E02 artifact"
        )
    if "reformulations" not in document:
        return problems
    texts = document["reformulations"]
    if not isinstance(texts, dict):
        problems.append(f"{source}: reformulations must be an object")
        return problems
    for task_id in task_ids or ():
        text = texts.get(task_id)
        if not isinstance(text, str) or not text.strip():
            problems.append(
                f"{source} (revision {revision}) has no reformulation for task {task_id!r}"
                + ("" if text is None else f" (got {text!r:.60})")
            )
    return problems


def load_reformulations(
    path: str | Path,
    *,
    expected_code_revision: str,
    task_ids: Sequence[str],
    allow_synthetic: bool,
) -> Reformulations:
    """Read and validate the artifact at ``path`` (see :func:`reformulations_from_json`)."""
    location = Path(path)
    try:
        data = location.read_bytes()
    except OSError as error:
        raise ReformulationArtifactError(
            f"cannot read reformulation artifact {str(location)!r}: {error}"
        ) from error
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ReformulationArtifactError(
            f"reformulation artifact {str(location)!r} is not UTF-8 JSON: {error}"
        ) from error
    return reformulations_from_json(
        document,
        expected_code_revision=expected_code_revision,
        task_ids=task_ids,
        allow_synthetic=allow_synthetic,
        source=f"reformulation artifact {str(location)!r}",
        sha256=hashlib.sha256(data).hexdigest(),
    )
