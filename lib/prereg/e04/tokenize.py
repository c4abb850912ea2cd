"""Identifier-aware tokenizer for Go source and natural-language queries.

The rule (version :data:`TOKENIZER_VERSION`), applied to a text:

1. Identifiers are the maximal runs of word characters (Python ``re`` ``\\w``:
   Unicode letters, digits and ``_``), taken in order of appearance. Everything
   else (operators, punctuation, whitespace) separates identifiers.
2. Each identifier occurrence emits, lowercased and without repeats within that
   occurrence, in this order:

   a. the whole identifier (``parsehttpresponse_v2``);
   b. its snake_case parts: the identifier split on ``_``, empty pieces dropped
      (``parseHTTPResponse``, ``v2``);
   c. the camelCase parts of each snake part: a boundary before an ASCII
      uppercase letter that follows an ASCII lowercase letter or a digit
      (``parseHTTP`` -> ``parse|HTTP``), and before an ASCII uppercase letter
      that follows an uppercase letter and precedes a lowercase letter
      (``HTTPResponse`` -> ``HTTP|Response``);
   d. the digit-boundary parts of each camelCase part: a boundary between a
      letter and a digit, either way (``v2`` -> ``v|2``, ``Int64`` -> ``Int|64``).

   So ``parseHTTPResponse_v2`` gives ``parsehttpresponse_v2, parsehttpresponse,
   v2, parse, http, response, v, 2``. A token already emitted for the same
   occurrence is not repeated; a word that appears twice in the text is
   counted twice (term frequency is preserved across occurrences).

Case boundaries are ASCII-only: a non-ASCII letter never starts a part, but
stays inside its identifier and parts. Queries and documents use the same rule.
"""

from __future__ import annotations

import re
from functools import lru_cache

TOKENIZER_VERSION = "prereg-identifier-tokenizer-1"
"""Recorded in the plan; changes whenever the rule above changes."""

_IDENTIFIER = re.compile(r"\w+")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_DIGIT_BOUNDARY = re.compile(r"(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])")


class TokenizerInputError(TypeError):
    """The tokenizer was given something other than a ``str``."""


@lru_cache(maxsize=1 << 16)
def identifier_tokens(identifier: str) -> tuple[str, ...]:
    """Tokens of one identifier: whole, snake, camel and digit-boundary parts.

    Parameters
    ----------
    identifier : str
        One run of word characters, e.g. ``"parseHTTPResponse_v2"``.

    Returns
    -------
    tuple of str
        Lowercased tokens without repeats, in the order of the module rule.

    Examples
    --------
    >>> identifier_tokens("parseHTTPResponse_v2")
    ('parsehttpresponse_v2', 'parsehttpresponse', 'v2', 'parse', 'http', 'response', 'v', '2')
    """
    snake = [part for part in identifier.split("_") if part]
    camel = [piece for part in snake for piece in _CAMEL_BOUNDARY.split(part) if piece]
    digit = [piece for part in camel for piece in _DIGIT_BOUNDARY.split(part) if piece]
    seen: dict[str, None] = {}
    for token in (identifier, *snake, *camel, *digit):
        seen.setdefault(token.lower(), None)
    return tuple(seen)


def tokenize(text: str) -> list[str]:
    """Tokens of a text under the rule of :data:`TOKENIZER_VERSION`.

    Parameters
    ----------
    text : str
        Source code or a query.

    Returns
    -------
    list of str
        The concatenation of :func:`identifier_tokens` over the identifiers of
        ``text`` in order of appearance.

    Examples
    --------
    >>> tokenize("func (r *Runner) Run() error")
    ['func', 'r', 'runner', 'run', 'error']
    """
    if not isinstance(text, str):
        raise TokenizerInputError(
            f"text must be a str, got {type(text).__name__} {text!r:.60}; decode bytes first"
        )
    tokens: list[str] = []
    for identifier in _IDENTIFIER.findall(text):
        tokens.extend(identifier_tokens(identifier))
    return tokens
