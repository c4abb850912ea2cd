"""A small synthetic Go repository with E04 tasks, for software checks and demo runs.

:func:`make_synthetic_repository` writes, under ``dest``:

- ``repository/``: a git repository of a toy CI runner (executors, cache,
  config, shells, artifacts, ...; about 50 Go files) built with ``git
  fast-import`` from fixed author/committer names and dates, so the same
  generator state always gives the same commit ids. Commit 0 imports the code;
  commit ``i`` (1..tasks) is the base commit of task ``i``: it edits the task's
  gold functions (a guard clause with a comment), adds a new gold function to an
  existing file, or adds a new gold file. So every base commit has a first parent
  and the S001 corpus (at that parent) differs from the base.
- ``tasks.json``: the task file (:mod:`prereg.e04.tasks` schema) with
  ``"synthetic": true`` and a description.
- ``reformulations.json``: the E02 reformulation artifact
  ``{"code_revision": <rev>, "synthetic": true, "reformulations": {task_id: text}}``.

Nothing here is real GitLab Runner data; the labels say so.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prereg.e04.goparse import parse_go_functions, syntax_errors
from prereg.e04.tasks import TaskFile, dump_task_file, validate_against_repository
from prereg.e04.types import GoldFunction, Task

__all__ = ["SyntheticFixture", "SyntheticRepositoryError", "make_synthetic_repository"]

# Fixture identity (not plan numbers): who wrote the toy history, and when.
_AUTHOR = "Toy Runner Maintainers <maintainers@toy-runner.invalid>"
_FIRST_COMMIT_EPOCH = 1_700_000_000
_COMMIT_SPACING_SECONDS = 3_600

_PACKAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # directory: (file topics, nouns of the package's domain)
    "executors/shell": (
        ("executor", "process", "terminal", "script_runner"),
        ("shell", "process", "script", "signal", "workdir", "environment"),
    ),
    "executors/docker": (
        (
            "executor",
            "container",
            "image_puller",
            "volume_manager",
            "network_manager",
            "pull_policy",
        ),
        ("container", "image", "volume", "network", "registry", "policy"),
    ),
    "executors/kubernetes": (
        ("executor", "pod_builder", "secret_store", "service_account"),
        ("pod", "namespace", "secret", "account", "label", "toleration"),
    ),
    "executors/ssh": (
        ("executor", "client", "known_hosts"),
        ("host", "key", "session", "command", "port", "fingerprint"),
    ),
    "cache": (
        ("archiver", "extractor", "key_resolver", "s3_adapter", "gcs_adapter", "local_store"),
        ("archive", "key", "bucket", "object", "checksum", "path"),
    ),
    "config": (
        ("loader", "runner_config", "validation", "defaults", "feature_flags"),
        ("config", "token", "concurrency", "flag", "limit", "fallback"),
    ),
    "shells": (
        ("bash", "powershell", "pwsh", "cmd", "script_writer"),
        ("script", "command", "variable", "quote", "section", "line"),
    ),
    "common": (
        ("build", "job_response", "trace", "variables", "network_client"),
        ("job", "build", "trace", "variable", "response", "stage"),
    ),
    "helpers/retry": (
        ("backoff", "retry"),
        ("attempt", "delay", "backoff", "deadline", "failure", "jitter"),
    ),
    "helpers/path": (
        ("path", "sanitize"),
        ("path", "separator", "root", "segment", "name", "extension"),
    ),
    "artifacts": (
        ("uploader", "downloader", "metadata"),
        ("artifact", "upload", "download", "metadata", "expiry", "format"),
    ),
    "commands": (
        ("run", "register", "unregister", "verify"),
        ("runner", "token", "registration", "service", "signal", "worker"),
    ),
    "session": (
        ("server", "terminal_proxy"),
        ("session", "terminal", "proxy", "socket", "timeout", "client"),
    ),
}
_NEW_TOPICS = ("retention_policy", "quota_guard", "health_probe", "credential_helper")
_VERBS = {
    "Resolve": "resolves",
    "Prepare": "prepares",
    "Validate": "validates",
    "Load": "loads",
    "Build": "builds",
    "Upload": "uploads",
    "Cleanup": "cleans up",
    "Parse": "parses",
    "Expand": "expands",
    "Write": "writes",
    "Restore": "restores",
    "Compute": "computes",
    "Register": "registers",
    "Close": "closes",
    "Watch": "watches",
    "Normalize": "normalizes",
}
_TAILS = (
    "for the current build",
    "before the job starts",
    "used by the runner",
    "and reports an error when it is missing",
    "from the job configuration",
    "after a retry",
)
_CONDITIONS = (
    "is empty",
    "contains spaces",
    "is set twice",
    "points to a symlink",
    "is longer than the limit",
    "changes between retries",
)


class SyntheticRepositoryError(ValueError):
    """Bad arguments, or a fixture that fails its own validity checks."""


@dataclass(frozen=True)
class SyntheticFixture:
    """Paths written by :func:`make_synthetic_repository` and the head commit."""

    repository: Path
    tasks_file: Path
    reformulations_file: Path
    head_commit: str


@dataclass
class _Function:
    name: str
    receiver: str | None
    shape: str
    doc: str
    noun: str
    patch: list[str] = field(default_factory=list)


@dataclass
class _File:
    path: str
    package: str
    type_name: str
    nouns: tuple[str, ...]
    functions: list[_Function]


def _camel(words: str | list[str]) -> str:
    parts = words.split("_") if isinstance(words, str) else words
    return "".join(p[:1].upper() + p[1:] for p in parts)


def _words(identifier_words: str) -> str:
    return identifier_words.replace("_", " ")


def _make_function(rng: np.random.Generator, file: _File, shape: str, taken: set[str]) -> _Function:
    verbs = list(_VERBS)
    while True:
        verb = verbs[int(rng.integers(len(verbs)))]
        noun = file.nouns[int(rng.integers(len(file.nouns)))]
        name = verb + _camel(noun)
        if shape == "C":
            name = verb + file.type_name + _camel(noun) + "s"
        if name not in taken:
            break
    taken.add(name)
    tail = _TAILS[int(rng.integers(len(_TAILS)))]
    doc = f"{name} {_VERBS[verb]} the {noun} of the {_words(file.path.rsplit('/', 1)[-1][:-3])} {tail}."
    receiver = None if shape == "C" else file.type_name
    return _Function(name=name, receiver=receiver, shape=shape, doc=doc, noun=noun)


def _new_file(
    rng: np.random.Generator, directory: str, topic: str, nouns: tuple[str, ...]
) -> _File:
    package = directory.rsplit("/", 1)[-1]
    file = _File(f"{directory}/{topic}.go", package, _camel(topic), nouns, [])
    taken: set[str] = set()
    shapes = ["A", "B", "C"] + [
        ("A", "B", "C", "D")[int(rng.integers(4))] for _ in range(int(rng.integers(1, 4)))
    ]
    for shape in shapes:
        file.functions.append(_make_function(rng, file, shape, taken))
    return file


def _render_function(file: _File, fn: _Function) -> list[str]:
    r = file.type_name[:1].lower()
    noun = fn.noun
    lines = [f"// {fn.doc}"]
    if fn.shape == "A":
        lines += [
            f"func ({r} *{file.type_name}) {fn.name}({noun} string) error {{",
            *fn.patch,
            f'\tif {noun} == "" {{',
            f'\t\treturn errors.New("{file.package}: missing {noun}")',
            "\t}",
            f"\t{r}.name = strings.TrimSpace({noun})",
            "\treturn nil",
            "}",
        ]
    elif fn.shape == "B":
        lines += [
            f"func ({r} *{file.type_name}) {fn.name}({noun} string, attempt int) (string, error) {{",
            *fn.patch,
            f'\tvalue := fmt.Sprintf("%s-%d", {noun}, attempt)',
            f"\tif len(value) > {r}.limit {{",
            f'\t\treturn "", fmt.Errorf("{noun} %q exceeds the limit of %d", value, {r}.limit)',
            "\t}",
            "\treturn value, nil",
            "}",
        ]
    elif fn.shape == "C":
        lines += [
            f"func {fn.name}(items []string) []string {{",
            *fn.patch,
            "\tresult := make([]string, 0, len(items))",
            "\tfor _, item := range items {",
            f'\t\tif strings.HasPrefix(item, "{noun}") {{',
            "\t\t\tresult = append(result, item)",
            "\t\t}",
            "\t}",
            "\treturn result",
            "}",
        ]
    else:
        lines += [
            f"func ({r} *{file.type_name}) {fn.name}() bool {{",
            *fn.patch,
            f'\treturn {r}.name != "" && {r}.limit > 0 && len({r}.{noun}s) > 0',
            "}",
        ]
    return lines


def _render_file(file: _File) -> str:
    topic = _words(file.path.rsplit("/", 1)[-1][:-3])
    nouns = sorted({fn.noun for fn in file.functions if fn.shape == "D"})
    lines = [
        f"package {file.package}",
        "",
        "import (",
        '\t"errors"',
        '\t"fmt"',
        '\t"strings"',
        ")",
        "",
        f"// {file.type_name} holds the {topic} state of the {file.package} package.",
        f"type {file.type_name} struct {{",
        "\tname  string",
        "\tlimit int",
    ]
    lines += [f"\t{noun}s []string" for noun in nouns]
    lines += ["}"]
    for fn in file.functions:
        lines += [""] + _render_function(file, fn)
    return "\n".join(lines) + "\n"


def _patch_for(fn: _Function, comment: str) -> list[str]:
    """Lines inserted at the top of ``fn``'s body by a task's base commit."""
    n = fn.noun
    r = fn.receiver[:1].lower() if fn.receiver else ""
    guard = {
        "A": [
            f'\tif strings.ContainsAny({n}, " \\t") {{',
            f'\t\t{n} = strings.Join(strings.Fields({n}), "-")',
            "\t}",
        ],
        "B": ["\tif attempt < 0 {", "\t\tattempt = 0", "\t}"],
        "C": ["\tif len(items) == 0 {", "\t\treturn nil", "\t}"],
        "D": [f"\tif {r} == nil {{", "\t\treturn false", "\t}"],
    }[fn.shape]
    return [f"\t// {comment}", *guard]


def _fast_import_stream(commits: list[tuple[str, dict[str, str]]]) -> bytes:
    chunks: list[bytes] = []
    for index, (message, changes) in enumerate(commits):
        when = _FIRST_COMMIT_EPOCH + index * _COMMIT_SPACING_SECONDS
        msg = message.encode() + b"\n"
        chunks.append(b"commit refs/heads/main\n")
        chunks.append(f"mark :{index + 1}\n".encode())
        chunks.append(f"author {_AUTHOR} {when} +0000\n".encode())
        chunks.append(f"committer {_AUTHOR} {when} +0000\n".encode())
        chunks.append(f"data {len(msg)}\n".encode() + msg)
        if index:
            chunks.append(f"from :{index}\n".encode())
        for path in sorted(changes):
            data = changes[path].encode("utf-8")
            chunks.append(f"M 100644 inline {path}\n".encode())
            chunks.append(f"data {len(data)}\n".encode() + data + b"\n")
        chunks.append(b"\n")
    return b"".join(chunks)


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    done = subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, check=False, env=env
    )
    if done.returncode != 0:
        raise SyntheticRepositoryError(
            f"git {' '.join(args)} failed in {str(repo)!r}: {done.stderr.decode(errors='replace')}"
        )
    return done.stdout.decode()


def _query(rng: np.random.Generator, file: _File, fn: _Function) -> tuple[str, str]:
    topic = _words(file.path.rsplit("/", 1)[-1][:-3])
    verb = next(v for v in _VERBS if fn.name.startswith(v))
    condition = _CONDITIONS[int(rng.integers(len(_CONDITIONS)))]
    templates = (
        f"The {file.package} {topic} fails to {verb.lower()} the {fn.noun} when the {fn.noun} {condition}",
        f"{_VERBS[verb].capitalize()} {fn.noun} incorrectly in {file.package} {topic} if the value {condition}",
        f"Runner job breaks: {topic} does not {verb.lower()} {fn.noun} values that {_plural(condition)}",
    )
    return templates[int(rng.integers(len(templates)))], condition


def _plural(condition: str) -> str:
    """``is empty`` -> ``are empty``, ``contains spaces`` -> ``contain spaces``."""
    verb, _, rest = condition.partition(" ")
    plural = {"is": "are", "contains": "contain", "points": "point", "changes": "change"}
    return f"{plural.get(verb, verb)} {rest}"


def _reformulation(file: _File, fn: _Function, query: str) -> str:
    topic = _words(file.path.rsplit("/", 1)[-1][:-3])
    return (
        f"Locate the Go code in package {file.package} ({topic}) that handles "
        f"the {fn.noun} step described as: {query.lower()}"
    )


def make_synthetic_repository(
    dest: str | os.PathLike[str],
    *,
    rng: np.random.Generator,
    tasks: int,
    code_revision: str,
) -> SyntheticFixture:
    """Build the synthetic repository, its task file and its reformulation artifact.

    Parameters
    ----------
    dest : path
        A directory that does not exist yet or is empty.
    rng : numpy.random.Generator
        All choices (functions, queries, edits) come from it; the same state
        gives byte-identical files and identical commit ids.
    tasks : int
        Number of tasks (E04: 15), between 1 and the number of files.
    code_revision : str
        The E02 code revision written into the reformulation artifact
        (E04: ``1a7066f6c7682793b6f04445c776a93cc4fac895``).

    Returns
    -------
    SyntheticFixture
    """
    out = Path(dest)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SyntheticRepositoryError(f"dest={str(dest)!r} must be an empty or new directory")
    if not isinstance(rng, np.random.Generator):
        raise SyntheticRepositoryError(
            f"rng must be a numpy.random.Generator, got {type(rng).__name__}"
        )
    if not isinstance(code_revision, str) or not code_revision:
        raise SyntheticRepositoryError(
            f"code_revision={code_revision!r} must be a non-empty string"
        )
    files = [
        _new_file(rng, d, t, nouns) for d, (topics, nouns) in _PACKAGES.items() for t in topics
    ]
    if isinstance(tasks, bool) or not isinstance(tasks, int) or not 1 <= tasks <= len(files):
        raise SyntheticRepositoryError(f"tasks={tasks!r} must be an integer in 1..{len(files)}")
    readme = "# toy-runner\n\nA synthetic CI runner used to test retrieval harnesses.\n"
    commits = [
        (
            "Import toy runner",
            {
                "go.mod": "module example.invalid/toy-runner\n\ngo 1.21\n",
                "README.md": readme,
                **{f.path: _render_file(f) for f in files},
            },
        )
    ]
    targets = [int(i) for i in rng.permutation(len(files))[:tasks]]
    plan = []  # (task id, query, reformulation, [(file, function)])
    for number, target in enumerate(targets, start=1):
        task_id = f"SYN{number:02d}"
        kind = ("edit", "edit", "add_function", "edit", "new_file")[(number - 1) % 5]
        file = files[target]
        if kind == "new_file":
            directory = file.path.rsplit("/", 1)[0]
            topic = _NEW_TOPICS[(number // 5) % len(_NEW_TOPICS)]
            existing = {f.path for f in files}
            while f"{directory}/{topic}.go" in existing:
                topic += "_v2"
            file = _new_file(rng, directory, topic, file.nouns)
            files.append(file)
            gold = [(file, file.functions[int(rng.integers(len(file.functions)))])]
        elif kind == "add_function":
            taken = {fn.name for fn in file.functions}
            new = _make_function(rng, file, ("A", "B", "C")[int(rng.integers(3))], taken)
            file.functions.insert(int(rng.integers(len(file.functions) + 1)), new)
            gold = [(file, new)]
        else:
            gold = [(file, file.functions[int(rng.integers(len(file.functions)))])]
            if number % 3 == 0:  # a second gold file in the same package when there is one
                siblings = [f for f in files if f is not file and f.package == file.package]
                if siblings:
                    other = siblings[int(rng.integers(len(siblings)))]
                    gold.append((other, other.functions[int(rng.integers(len(other.functions)))]))
        query, condition = _query(rng, *gold[0])
        if kind == "edit":
            for _, fn in gold:
                fn.patch = _patch_for(fn, f"Handle a {fn.noun} that {condition} ({task_id}).")
        commits.append((f"{task_id}: {query}", {g.path: _render_file(g) for g, _ in gold}))
        plan.append((task_id, query, _reformulation(*gold[0], query), gold, len(commits) - 1))
    for message, changes in commits:
        for path, text in changes.items():
            if path.endswith(".go") and syntax_errors(text.encode()):
                raise SyntheticRepositoryError(f"generated {path!r} ({message!r}) is not valid Go")
    out.mkdir(parents=True, exist_ok=True)
    repo = out / "repository"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "fast-import", "--quiet", "--done", stdin=_fast_import_stream(commits) + b"done\n")
    _git(repo, "reset", "-q", "--hard", "main")
    ids = _git(repo, "rev-list", "--reverse", "main").split()
    task_records = []
    for task_id, query, _, gold, commit_index in plan:
        base = ids[commit_index]
        gold_functions = []
        for gfile, fn in gold:
            text = commits_text_at(commits, commit_index, gfile.path)
            parsed = [
                f
                for f in parse_go_functions(gfile.path, text.encode())
                if f.name == fn.name and f.receiver == fn.receiver
            ]
            gold_functions.append(
                GoldFunction(
                    gfile.path, fn.name, fn.receiver, parsed[0].start_line, parsed[0].end_line
                )
            )
        task_records.append(
            Task(
                task_id,
                query,
                base,
                tuple(dict.fromkeys(g.path for g, _ in gold)),
                tuple(gold_functions),
            )
        )
    task_file = TaskFile(
        tasks=tuple(task_records),
        synthetic=True,
        repository="toy-runner (synthetic)",
        description=(
            "Synthetic E04 tasks over a generated toy CI runner repository; "
            "not GitLab Runner data. For software checks and demo runs only."
        ),
    )
    validate_against_repository(task_file, repo)
    tasks_path = out / "tasks.json"
    tasks_path.write_text(dump_task_file(task_file), encoding="utf-8")
    reformulations_path = out / "reformulations.json"
    artifact = {
        "code_revision": code_revision,
        "synthetic": True,
        "reformulations": {task_id: text for task_id, _, text, _, _ in plan},
    }
    reformulations_path.write_text(
        json.dumps(artifact, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return SyntheticFixture(repo, tasks_path, reformulations_path, ids[-1])


def commits_text_at(commits: list[tuple[str, dict[str, str]]], index: int, path: str) -> str:
    """The content of ``path`` after commit ``index`` of an import plan."""
    for _, changes in reversed(commits[: index + 1]):
        if path in changes:
            return changes[path]
    raise SyntheticRepositoryError(f"{path!r} does not exist at commit {index}")
