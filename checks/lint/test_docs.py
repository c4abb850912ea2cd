"""The docs a reader navigates: README.md stays at most 8 KB and starts with the two commands
(CI runs the second, .ci/run), every relative link in README.md and docs/**/*.md names a
file of the checkout, and every page under docs/ is reachable from README.md's links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.software

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_BYTES = 8192
COMMANDS = (
    (
        "bash install.sh && .venv/bin/prereg demo                # the whole pipeline end to end"
        " at demo scale"
    ),
    (
        "bash install.sh && .venv/bin/pytest -m software -n 2   # the tests on two workers"
        " (exactly what CI runs)"
    ),
)
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # text may wrap
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:, ...


def link_targets(markdown: str) -> list[str]:
    """The targets of the inline links ``[text](target)`` of ``markdown``, outside code."""
    prose = CODE_SPAN.sub("", FENCE.sub("", markdown))
    return LINK.findall(prose)


def broken_links(page: Path, root: Path) -> list[str]:
    """Each relative link of ``page`` whose file (its fragment dropped) is missing or lies
    outside ``root``, as ``"<page>: <target>"``."""
    broken = []
    for target in link_targets(page.read_text(encoding="utf-8")):
        path = target.split("#", 1)[0]
        if EXTERNAL.match(target) or not path:
            continue
        resolved = (page.parent / path).resolve()
        if root.resolve() not in resolved.parents or not resolved.exists():
            broken.append(f"{page.relative_to(root).as_posix()}: {target}")
    return broken


def linked_pages(start: Path, root: Path) -> set[Path]:
    """The Markdown files reachable from ``start`` through relative links."""
    seen: set[Path] = set()
    todo = [start.resolve()]
    while todo:
        page = todo.pop()
        if page in seen or not page.is_file() or page.suffix != ".md":
            continue
        seen.add(page)
        for target in link_targets(page.read_text(encoding="utf-8")):
            path = target.split("#", 1)[0]
            if path and not EXTERNAL.match(target):
                todo.append((page.parent / path).resolve())
    return seen


def _pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def test_the_readme_is_at_most_8_kb():
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, (
        f"README.md is {size} bytes, over {MAX_README_BYTES}: move a section into docs/ "
        "(tutorial, how-to, reference, explanation, protocols) and link it from the index"
    )


def test_the_readme_starts_with_the_two_commands_ci_runs():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[:6] == ["# prereg", "", "```bash", *COMMANDS, "```"], (
        f"README.md's first lines are {lines[:6]}; keep the two commands byte for byte "
        "(.ci/run runs the second)"
    )
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert COMMANDS[1].split("  #")[0].rstrip() in ci, ".ci/run no longer runs README's command"


def test_every_relative_link_of_the_docs_resolves():
    broken = [b for page in _pages(ROOT) for b in broken_links(page, ROOT)]
    assert not broken, f"links to no file of the checkout (fix the path): {broken}"


def test_every_docs_page_is_reachable_from_the_readme():
    reachable = linked_pages(README, ROOT)
    orphans = [p.relative_to(ROOT).as_posix() for p in _pages(ROOT) if p.resolve() not in reachable]
    assert not orphans, (
        f"pages no link from README.md reaches (add each to its Docs index): {orphans}"
    )


def test_a_broken_link_and_an_orphan_page_are_found(tmp_path):
    (tmp_path / "docs" / "how-to").mkdir(parents=True)
    (tmp_path / "docs" / "how-to" / "here.md").write_text("back: [readme](../../README.md)\n")
    (tmp_path / "docs" / "orphan.md").write_text("# nobody links here\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/how-to/here.md#part) [gone](docs/missing.md) [out](../elsewhere.md) [a\n"
        "wrapped](docs/wrapped.md)\n"
        "[web](https://example.org/x.md) `[code](docs/nothing.md)`\n"
        "```\n[fenced](docs/nothing.md)\n```\n"
    )
    assert broken_links(tmp_path / "README.md", tmp_path) == [
        "README.md: docs/missing.md",
        "README.md: ../elsewhere.md",
        "README.md: docs/wrapped.md",
    ]
    assert broken_links(tmp_path / "docs" / "how-to" / "here.md", tmp_path) == []
    reachable = linked_pages(tmp_path / "README.md", tmp_path)
    assert (tmp_path / "docs" / "how-to" / "here.md").resolve() in reachable
    assert (tmp_path / "docs" / "orphan.md").resolve() not in reachable


TARGET = st.from_regex(r"[A-Za-z0-9_./-]{1,30}(#[a-z0-9-]{1,10})?", fullmatch=True)


@given(st.lists(st.tuples(st.text("abc xyz", max_size=10), TARGET), max_size=5))
def test_link_targets_reads_every_inline_link_in_order(links):
    markdown = " and ".join(f"[{text}]({target})" for text, target in links)
    assert link_targets(markdown) == [target for _, target in links]


@given(TARGET)
def test_a_link_inside_code_is_not_a_link(target):
    assert link_targets(f"`[x]({target})`\n\n```\n[y]({target})\n```\n") == []
