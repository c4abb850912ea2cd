"""Count the lines a researcher writes for prereg per stage, beside the science.

Usage::

    python benchmarks/count_stage_lines.py

A stage's prereg lines are the code lines (no blank line, comment or docstring) of its
stage kind module and its experiments module, less the science: the top-level functions
and classes named as such (the experiment, the analysis, the parameters' declaration).
Measured on the worked example (examples/prereg-paired-models: ``compute`` and
``build_summary`` are its science; its parameters live in ``settings.py``, which is not
counted) and on a two-stage study that ``prereg init`` writes afresh (``prereg init``, then
``prereg init --stage train`` and ``prereg init --stage decision --requires train``:
``compute``, ``build_summary``, ``decide`` and each ``Settings`` are the science). Prints
each file's count and each stage's total against the goal of 40.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL = 40
SKIPPED_TOKENS = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            value = getattr(first, "value", None)
            if isinstance(first, ast.Expr) and isinstance(getattr(value, "value", None), str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(source: str, science: frozenset[str] = frozenset()) -> int:
    """The lines of ``source`` that hold code, outside docstrings and outside the top-level
    functions and classes named in ``science`` (decorators included)."""
    tree = ast.parse(source)
    left_out = _docstring_lines(tree)
    for node in tree.body:
        if getattr(node, "name", None) in science:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            left_out.update(range(start, (node.end_lineno or node.lineno) + 1))
    counted: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in SKIPPED_TOKENS:
            counted.update(range(token.start[0], token.end[0] + 1))
    return len(counted - left_out)


def report(title: str, stages: dict[str, list[Path]], science: frozenset[str]) -> bool:
    """Print each stage's files and total; True when every stage is within the goal."""
    print(title)
    within = True
    for stage, files in stages.items():
        counts = [code_lines(path.read_text(encoding="utf-8"), science) for path in files]
        for path, count in zip(files, counts):
            print(f"  {stage:<10} {path.name:<28} {count:4d}")
        total = sum(counts)
        within &= total <= GOAL
        print(f"  {stage:<10} {'stage total':<28} {total:4d}  (goal {GOAL})")
    return within


def scaffolded_study(folder: Path) -> dict[str, list[Path]]:
    """A two-stage study laid out by ``prereg init`` in ``folder``: its stages' files."""
    prereg = [sys.executable, "-m", "prereg.cli"]
    for args in (
        ["init", str(folder)],
        ["init", "--stage", "train", str(folder)],
        ["init", "--stage", "decision", "--requires", "train", str(folder)],
    ):
        subprocess.run([*prereg, *args], check=True, capture_output=True, cwd=folder.parent)
    return {
        stage: [
            folder / "src" / stage / "kind.py",
            folder / "experiments" / f"test_{stage}.py",
        ]
        for stage in ("train", "decision")
    }


def main() -> int:
    example = ROOT / "examples" / "prereg-paired-models"
    within = report(
        "worked example (examples/prereg-paired-models)",
        {
            "paired": [
                example / "src" / "prereg_paired_models" / "kind.py",
                example / "project" / "experiments" / "test_paired_models.py",
            ]
        },
        frozenset({"compute", "build_summary"}),
    )
    with tempfile.TemporaryDirectory(prefix="prereg-count-") as scratch:
        stages = scaffolded_study(Path(scratch) / "study")
        within &= report(
            "two-stage study written by prereg init",
            stages,
            frozenset({"compute", "build_summary", "decide", "Settings"}),
        )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
