"""``pattern`` in an output schema: the portable ECMA-262 subset, run on Python's ``re``.

UPSTREAM-DIGEST-2 §4: a pattern is an unanchored search, in a subset both languages run alike.
Refused (``UnsupportedPatternError``): lookbehind, backreferences (``\\1``, ``\\k``), named groups,
inline flags, ``\\p``/``\\P``/``\\u``/``\\x``/``\\c``, ``[]`` and ``[^]``, a pattern over 1000
characters, a repetition bound over 1000, groups nested deeper than 32. What is kept is
translated where the two engines differ: ``\\d \\w \\s \\b`` are ASCII (``re.ASCII``), ``.``
excludes the four ECMA line terminators, and ``$`` is the end of the string (Python's ``$``
also matches before a final newline). Strings are matched per code point.
"""

from __future__ import annotations

import re
import warnings
from functools import cache

MAX_PATTERN = 1000
MAX_REPEAT = 1000
MAX_DEPTH = 32

_SIMPLE_ESCAPES = frozenset("dDwWsSbBfnrtv")
_GROUP_OPENERS = ("(?:", "(?=", "(?!")
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}", re.ASCII)
_DOT = "[^\\n\\r\\u2028\\u2029]"


class UnsupportedPatternError(ValueError):
    """The pattern uses something outside the portable subset; the message says what."""


@cache
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled search for ``pattern``, or ``UnsupportedPatternError``."""
    if len(pattern) > MAX_PATTERN:
        raise UnsupportedPatternError(f"pattern longer than {MAX_PATTERN} characters")
    translated = _translate(pattern)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set": meant literally in ECMA
            return re.compile(translated, re.ASCII)
    except re.error as exc:
        raise UnsupportedPatternError(f"pattern does not compile: {exc}") from None


def _translate(pattern: str) -> str:
    out: list[str] = []
    depth = 0
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(_escape(pattern, i))
            i += 2
            continue
        if in_class:
            in_class = char != "]"
            out.append("\\" + char if char in "[&~|" else char)
        elif char == "[":
            if pattern.startswith(("[]", "[^]"), i):
                raise UnsupportedPatternError("empty classes [] and [^] are not portable")
            in_class = True
            out.append(char)
            if pattern.startswith("[^", i):
                out.append("^")
                i += 1
        elif char == "(":
            if pattern.startswith("(?", i) and not pattern.startswith(_GROUP_OPENERS, i):
                raise UnsupportedPatternError(
                    "only (?: (?= (?! groups are portable (no lookbehind, names or flags)"
                )
            depth += 1
            if depth > MAX_DEPTH:
                raise UnsupportedPatternError(f"groups nested deeper than {MAX_DEPTH}")
            out.append(char)
        elif char == ")":
            depth -= 1
            out.append(char)
        elif char == "{":
            _check_repeat(pattern, i)
            out.append(char)
        else:
            out.append({".": _DOT, "$": "\\Z"}.get(char, char))
        i += 1
    return "".join(out)


def _escape(pattern: str, i: int) -> str:
    if i + 1 >= len(pattern):
        raise UnsupportedPatternError("pattern ends with a lone backslash")
    char = pattern[i + 1]
    if char in _SIMPLE_ESCAPES:
        return "\\" + char
    if char == "0" and not pattern[i + 2:i + 3].isdigit():
        return "\\x00"
    if char.isascii() and char.isalnum():
        raise UnsupportedPatternError(f"escape \\{char} is not portable (backreference or class)")
    return "\\" + char


def _check_repeat(pattern: str, i: int) -> None:
    match = _REPEAT.match(pattern, i)
    if match is None:
        return  # a literal brace, as both engines read it
    bounds = [int(b) for b in match.groups() if b]
    if any(b > MAX_REPEAT for b in bounds):
        raise UnsupportedPatternError(f"repetition bound over {MAX_REPEAT}")
