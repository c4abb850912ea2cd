import pytest

pytestmark = pytest.mark.software

import stat

from hypothesis import given, settings
from hypothesis import strategies as st

from prereg.e04.goparse import (
    GO_KEYWORDS,
    GoParseError,
    gofmt_check,
    parse_go_functions,
    syntax_errors,
)

SOURCE = b"""package runner

// Run starts the job.
func (r *Runner) Run(ctx context.Context) error {
	return nil
}

func (s Set[K, V]) Len() int { return len(s.m) }

func (c *Cache[T]) Get(
	key string,
) (T, bool) {
	var zero T
	return zero, false
}

func (Plain) Name() string { return "plain" }

func New[T any](v T) *Cache[T] {
	return &Cache[T]{}
}

var hook = func() {}

func init() {}
func init() {}
"""


def test_functions_spans_receivers_and_text():
    functions = parse_go_functions("runner/run.go", SOURCE)
    # Expected spans read off SOURCE by hand (1-based, inclusive, doc comment excluded).
    assert [(f.name, f.receiver, f.start_line, f.end_line) for f in functions] == [
        ("Run", "Runner", 4, 6),
        ("Len", "Set", 8, 8),
        ("Get", "Cache", 10, 15),
        ("Name", "Plain", 17, 17),
        ("New", None, 19, 21),
        ("init", None, 25, 25),
        ("init", None, 26, 26),
    ]
    assert all(f.path == "runner/run.go" for f in functions)
    assert functions[0].text == "func (r *Runner) Run(ctx context.Context) error {\n\treturn nil\n}"
    lines = SOURCE.decode().splitlines()
    for f in functions:
        assert f.text == "\n".join(lines[f.start_line - 1 : f.end_line])


def test_parenthesized_and_qualified_receivers():
    src = b"package p\nfunc (r *(Runner)) A() {}\nfunc (r (*pkg.Remote)) B() {}\n"
    assert [(f.name, f.receiver) for f in parse_go_functions("p.go", src)] == [
        ("A", "Runner"),
        ("B", "Remote"),
    ]


def test_syntax_errors_report_error_and_missing_nodes():
    assert syntax_errors(SOURCE) == []
    broken = b"package p\n\nfunc A() {\n\tx := \n}\n\nfunc B( {\n}\n"
    errors = syntax_errors(broken)
    assert errors and all(line >= 3 for line, _ in errors)
    missing_brace = b"package p\nfunc A() {\n"
    assert syntax_errors(missing_brace) != []


def test_source_must_be_bytes():
    with pytest.raises(GoParseError, match="source must be bytes"):
        parse_go_functions("a.go", "package a")  # type: ignore[arg-type]
    with pytest.raises(GoParseError, match="path"):
        parse_go_functions("", b"package a")


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(
        st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=6
    ),
    blank=st.lists(st.integers(0, 3), min_size=6, max_size=6),
)
def test_generated_functions_round_trip(names, blank):
    """Spans of generated declarations equal the lines they were written at."""
    names = [n for n in names if n not in GO_KEYWORDS]
    lines = ["package p"]
    expected = []
    for i, name in enumerate(names):
        lines += [""] * blank[i]
        start = len(lines) + 1
        lines += [f"func (x *T{i}[K]) {name}() {{", "\treturn", "}"]
        expected.append((name, f"T{i}", start, start + 2))
    source = ("\n".join(lines) + "\n").encode()
    got = [
        (f.name, f.receiver, f.start_line, f.end_line) for f in parse_go_functions("p.go", source)
    ]
    assert got == expected
    assert syntax_errors(source) == []


def test_gofmt_check_absent_binary_is_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gofmt_check(b"package p\n") is None


def test_gofmt_check_uses_exit_status(tmp_path):
    fake = tmp_path / "gofmt"
    # A stand-in gofmt: fails when the input contains BAD, like gofmt -e on a syntax error.
    fake.write_text("#!/bin/sh\nif grep -q BAD; then exit 2; fi\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert gofmt_check(b"package p\n", gofmt=str(fake)) is True
    assert gofmt_check(b"package BAD\n", gofmt=str(fake)) is False
