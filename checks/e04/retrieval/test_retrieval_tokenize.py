import pytest

pytestmark = pytest.mark.software

import re

from hypothesis import given
from hypothesis import strategies as st

from prereg.e04.tokenize import (
    TOKENIZER_VERSION,
    TokenizerInputError,
    identifier_tokens,
    tokenize,
)

identifiers = st.from_regex(r"[A-Za-z0-9_]{1,24}", fullmatch=True)
texts = st.text(alphabet=st.sampled_from(list("abcXYZ019_ .(){}*/\n\tüÄ")), max_size=80)


# Expected values written out by hand from the rule in the module docstring.
@pytest.mark.parametrize(
    ("identifier", "expected"),
    [
        (
            "parseHTTPResponse_v2",
            [
                "parsehttpresponse_v2",
                "parsehttpresponse",
                "v2",
                "parse",
                "http",
                "response",
                "v",
                "2",
            ],
        ),
        ("Runner", ["runner"]),
        ("run_test", ["run_test", "run", "test"]),
        ("__harness_distractors__", ["__harness_distractors__", "harness", "distractors"]),
        ("HTTP2Server", ["http2server", "http2", "server", "http", "2"]),
        ("Int64", ["int64", "int", "64"]),
        # The rule splits a plural acronym as UR|Ls (documented limitation).
        ("getURLs", ["geturls", "get", "ur", "ls"]),
        ("XMLHttpRequest", ["xmlhttprequest", "xml", "http", "request"]),
        ("run_run", ["run_run", "run"]),
        ("_", ["_"]),
    ],
)
def test_identifier_examples(identifier: str, expected: list[str]) -> None:
    assert list(identifier_tokens(identifier)) == expected


def test_text_example_keeps_term_frequency() -> None:
    assert tokenize("func (r *Runner) Run() error { r.Run() }") == [
        "func",
        "r",
        "runner",
        "run",
        "error",
        "r",
        "run",
    ]


def test_non_string_is_refused() -> None:
    with pytest.raises(TokenizerInputError, match="decode bytes"):
        tokenize(b"package main")  # type: ignore[arg-type]


def test_version_is_a_nonempty_string() -> None:
    assert isinstance(TOKENIZER_VERSION, str) and TOKENIZER_VERSION


@given(identifiers)
def test_first_token_is_the_whole_identifier(identifier: str) -> None:
    assert identifier_tokens(identifier)[0] == identifier.lower()


@given(identifiers)
def test_tokens_are_lowercase_nonempty_and_distinct(identifier: str) -> None:
    tokens = identifier_tokens(identifier)
    assert all(t and t == t.lower() for t in tokens)
    assert len(set(tokens)) == len(tokens)


@given(identifiers)
def test_every_part_is_a_substring_of_the_identifier(identifier: str) -> None:
    assert all(t in identifier.lower() for t in identifier_tokens(identifier))


@given(identifiers)
def test_finest_parts_cover_the_identifier(identifier: str) -> None:
    # The finest parts are the runs of an independent regex (acronym, Capitalised
    # or lowercase word, digits), so every such run must be emitted as a token.
    tokens = set(identifier_tokens(identifier))
    runs = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", identifier)
    for run in runs:
        assert run.lower() in tokens


@given(texts, texts)
def test_concatenation_with_a_separator(a: str, b: str) -> None:
    assert tokenize(a + " " + b) == tokenize(a) + tokenize(b)


@given(st.text(alphabet=st.sampled_from(list(" .,;(){}[]*+-/\n\t\"'")), max_size=40))
def test_punctuation_only_gives_no_tokens(text: str) -> None:
    assert tokenize(text) == []


@given(texts)
def test_whole_identifiers_appear_in_order(text: str) -> None:
    tokens = tokenize(text)
    wholes = [w.lower() for w in re.findall(r"\w+", text)]
    position = 0
    for whole in wholes:
        position = tokens.index(whole, position) + 1
