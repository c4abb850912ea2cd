"""S002 distractor files: valid Go sources with task vocabulary under a reserved prefix.

E04 S002 adds 1, 5 or 10 synthetic Go files to the in-memory retrieval corpus.
The doses nest: the files of a task are generated once at the maximal dose from
a generator seeded per task, and a dose ``k`` takes the first ``k``, so the first
file is identical at every dose and the first five are shared by doses 5 and 10.

Each file is a small Go package (package clause, a struct type, a method and two
functions) whose identifiers and comments are composed from the task's query
words and the parts of its gold function, receiver and file names, so it looks
relevant to a lexical or dense retriever without being gold.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from prereg.e04.goparse import GO_KEYWORDS, gofmt_check, syntax_errors
from prereg.e04.types import Task

__all__ = [
    "DistractorError",
    "DistractorFile",
    "DistractorVocabulary",
    "distractor_vocabulary",
    "distractors_for_dose",
    "generate_distractors",
]

# Go keywords may not be identifiers or package names.
# Function words carry no task signal; they are left out of composed identifiers.
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "in",
        "into",
        "is",
        "it",
        "its",
        "not",
        "of",
        "on",
        "or",
        "should",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "this",
        "to",
        "was",
        "when",
        "where",
        "which",
        "while",
        "who",
        "why",
        "will",
        "with",
        "without",
    ]
)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_GO_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z]|[0-9]|$)|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_TASK_DIR_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class DistractorError(ValueError):
    """Bad arguments, or a generated file that is not valid Go."""


@dataclass(frozen=True)
class DistractorFile:
    """One generated file: its corpus path, UTF-8 source and SHA-256 of the source bytes."""

    path: str
    source: str
    sha256: str


def _identifier_parts(identifier: str) -> list[str]:
    """Lower-case parts of ``parseHTTPResponse_v2`` -> ``parse http response v 2``."""
    parts = []
    for chunk in identifier.split("_"):
        parts.extend(p.lower() for p in _CAMEL_PART.findall(chunk))
    return parts


@dataclass(frozen=True)
class DistractorVocabulary:
    """Words a task's distractors are composed from (see :func:`distractor_vocabulary`)."""

    query_words: tuple[str, ...]
    identifiers: tuple[str, ...]
    identifier_parts: tuple[str, ...]


def distractor_vocabulary(task: Task) -> DistractorVocabulary:
    """The vocabulary used to compose a task's distractors.

    Query words: alphanumeric words of the query (identifiers split into their
    camelCase/snake_case parts), lower-cased, at least three characters, not a
    stop word. Identifiers: the gold function names and their receivers, whole
    (they appear verbatim in comments). Identifier parts: the parts of those
    identifiers and of the gold file names (without ``.go``). All keep the order
    of first appearance, without repeats, so the vocabulary is deterministic.
    """
    query_words: dict[str, None] = {}
    for word in _WORD.findall(task.query):
        for part in _identifier_parts(word):
            if len(part) >= 3 and part.isalpha() and part not in _STOPWORDS:
                query_words[part] = None
    identifiers: list[str] = []
    for gold in task.gold_functions:
        identifiers.append(gold.name)
        if gold.receiver:
            identifiers.append(gold.receiver)
    whole = tuple(dict.fromkeys(i for i in identifiers if _GO_IDENTIFIER.fullmatch(i)))
    for file in task.gold_files:
        identifiers.append(file.rsplit("/", 1)[-1].removesuffix(".go"))
    id_parts: dict[str, None] = {}
    for identifier in identifiers:
        for part in _identifier_parts(identifier):
            if len(part) >= 2 and part.isalpha() and part not in _STOPWORDS:
                id_parts[part] = None
    return DistractorVocabulary(
        query_words=tuple(query_words), identifiers=whole, identifier_parts=tuple(id_parts)
    )


def _camel(parts: Sequence[str], exported: bool) -> str:
    text = "".join(p[:1].upper() + p[1:] for p in parts)
    return text if exported else text[:1].lower() + text[1:]


class _Namer:
    """Draws distinct, keyword-free identifiers for one file."""

    def __init__(self, rng: np.random.Generator, vocabulary: DistractorVocabulary) -> None:
        words, parts = vocabulary.query_words, vocabulary.identifier_parts
        self.rng = rng
        self.words = list(words) or list(parts)
        self.parts = list(parts) or list(words)
        self.whole = list(vocabulary.identifiers)
        self.used: set[str] = set()

    def pick(self, pool: Sequence[str]) -> str:
        return pool[int(self.rng.integers(len(pool)))]

    def name(self, exported: bool, size: int) -> str:
        pools = [self.parts, self.words, self.parts][:size]
        parts: list[str] = []
        for pool in pools:
            part = self.pick(pool)
            if part not in parts:  # no "cacheCache"
                parts.append(part)
        candidate = _camel(parts, exported)
        suffix = 2
        base = candidate
        while candidate in self.used or candidate in GO_KEYWORDS:
            candidate = f"{base}{suffix}"
            suffix += 1
        self.used.add(candidate)
        return candidate

    def sentence(self, length: int) -> str:
        pool = list(dict.fromkeys(self.words + self.parts + self.whole))
        order = self.rng.permutation(len(pool))[:length]
        return " ".join(pool[int(i)] for i in order)


def _render_file(namer: _Namer, package: str, literal: str, number: int) -> str:
    type_name = namer.name(exported=True, size=2)
    builder = "New" + type_name
    namer.used.add(builder)
    field_a, field_b, field_c = (namer.name(False, 2) for _ in range(3))
    method = namer.name(exported=True, size=3)
    counter = namer.name(exported=True, size=2)
    receiver = type_name[:1].lower()
    param = namer.name(False, 1)
    items = namer.name(False, 1)
    if receiver in (param, items) or receiver in GO_KEYWORDS:
        receiver = "self"
    lines = [
        f"// Package {package} {namer.sentence(8)}.",
        f"package {package}",
        "",
        f"// {type_name} keeps {namer.sentence(6)}.",
        f"type {type_name} struct {{",
        f"\t{field_a} string",
        f"\t{field_b} int",
        f"\t{field_c} []string",
        "}",
        "",
        f"// {builder} returns a {type_name} for {namer.sentence(5)}.",
        f"func {builder}() *{type_name} {{",
        f'\treturn &{type_name}{{{field_a}: "{literal}", {field_b}: {number}}}',
        "}",
        "",
        f"// {method} {namer.sentence(9)}.",
        f"func ({receiver} *{type_name}) {method}({param} string) (string, error) {{",
        f'\tif {param} == "" {{',
        f"\t\treturn {receiver}.{field_a}, nil",
        "\t}",
        f"\t{receiver}.{field_c} = append({receiver}.{field_c}, {param})",
        f"\t{receiver}.{field_b}++",
        f"\treturn {param}, nil",
        "}",
        "",
        f"// {counter} counts {namer.sentence(6)}.",
        f"func {counter}({items} []string) int {{",
        "\tcount := 0",
        f"\tfor _, item := range {items} {{",
        f'\t\tif item == "{literal}" {{',
        "\t\t\tcount++",
        "\t\t}",
        "\t}",
        "\treturn count",
        "}",
        "",
    ]
    return "\n".join(lines)


def _check_prefix(prefix: str, corpus_paths: Collection[str], task: Task) -> None:
    if not isinstance(prefix, str) or not prefix.endswith("/") or prefix.startswith("/"):
        raise DistractorError(
            f"prefix={prefix!r} must be a relative directory ending in '/', "
            "e.g. '__harness_distractors__/'"
        )
    if any(part in ("", ".", "..") for part in prefix[:-1].split("/")):
        raise DistractorError(f"prefix={prefix!r} has an empty, '.' or '..' segment")
    for path in (*corpus_paths, *task.gold_files):
        if path.startswith(prefix) or path == prefix[:-1]:
            raise DistractorError(
                f"prefix={prefix!r} collides with the corpus path {path!r}; "
                "choose a reserved prefix no corpus file uses"
            )


def generate_distractors(
    task: Task,
    *,
    count: int,
    prefix: str,
    rng: np.random.Generator,
    corpus_paths: Collection[str],
) -> tuple[DistractorFile, ...]:
    """``count`` distractor files for ``task``, in order, from ``rng``.

    Parameters
    ----------
    task : Task
        Supplies the query and gold names composed into the files.
    count : int
        How many files (E04: the maximal dose, 10).
    prefix : str
        Reserved directory every path starts with (E04: ``__harness_distractors__/``).
        Refused if any corpus path or gold file lies under it.
    rng : numpy.random.Generator
        Seeded per task; the files depend only on its state and the task.
    corpus_paths : collection of str
        Paths of the corpus the files are added to.

    Returns
    -------
    tuple of DistractorFile
        Paths ``<prefix><task_id>/dNN_<word>.go`` (``task_id`` with characters
        outside ``[A-Za-z0-9._-]`` replaced by ``_``).

    Raises
    ------
    DistractorError
        On a bad prefix or count, a task without usable vocabulary, or a file
        that tree-sitter-go (or ``gofmt -e``, when installed) does not accept.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise DistractorError(f"count={count!r} must be a non-negative integer")
    if not isinstance(rng, np.random.Generator):
        raise DistractorError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    _check_prefix(prefix, corpus_paths, task)
    vocabulary = distractor_vocabulary(task)
    words, parts = vocabulary.query_words, vocabulary.identifier_parts
    if not words and not parts:
        raise DistractorError(
            f"task {task.task_id!r} has no usable vocabulary (query {task.query!r}); "
            "a distractor needs query words or gold identifiers"
        )
    task_dir = _TASK_DIR_UNSAFE.sub("_", task.task_id).strip(".") or "task"
    width = max(2, len(str(count)))
    plain = [w for w in (*words, *parts) if w.isalpha() and w not in GO_KEYWORDS]
    files = []
    for index in range(1, count + 1):
        namer = _Namer(rng, vocabulary)
        word = namer.pick(plain) if plain else "code"
        second = namer.pick(plain) if plain else ""
        package = (word + (second if second != word else "")).lower() or "distractor"
        if package in GO_KEYWORDS:
            package += "pkg"
        literal = namer.pick(words or parts)
        number = int(rng.integers(2, 100))
        source = _render_file(namer, package, literal, number)
        path = f"{prefix}{task_dir}/d{index:0{width}d}_{word.lower()}.go"
        data = source.encode("utf-8")
        errors = syntax_errors(data)
        if errors or gofmt_check(data) is False:
            raise DistractorError(
                f"distractor {path!r} for task {task.task_id!r} is not valid Go "
                f"(tree-sitter errors at {errors or 'none'}, or gofmt -e failed)"
            )
        files.append(
            DistractorFile(path=path, source=source, sha256=hashlib.sha256(data).hexdigest())
        )
    return tuple(files)


def distractors_for_dose(
    task: Task,
    *,
    dose: int,
    max_dose: int,
    prefix: str,
    rng: np.random.Generator,
    corpus_paths: Collection[str],
) -> tuple[DistractorFile, ...]:
    """The first ``dose`` of the ``max_dose`` files :func:`generate_distractors` makes.

    Pass a *fresh* generator seeded per task (not per dose), e.g.
    ``numpy_generator(namespace, task_id)``: then dose 1 is a prefix of dose 5,
    which is a prefix of dose 10 (E04 nested doses).
    """
    if isinstance(dose, bool) or not isinstance(dose, int) or not 0 <= dose <= max_dose:
        raise DistractorError(f"dose={dose!r} must be an integer in 0..max_dose={max_dose!r}")
    files = generate_distractors(
        task, count=max_dose, prefix=prefix, rng=rng, corpus_paths=corpus_paths
    )
    return files[:dose]
