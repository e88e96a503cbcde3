"""JSON from outside (an HTTP request body) read into a value the log can hold, or refused.

A value read here can go into a log line as it is: ``canonical`` can write it and reading that
line gives the same value back. So a text is refused when it is not UTF-8, nests deeper than a
line may, names an object key twice (readers disagree on which one wins), spells NaN or
Infinity, holds an integer outside ±(2^53-1) (the only integers the log holds exactly), a
number that is no finite double (``1e400``) or a nonzero one that would read as 0
(``1e-400``), or a string with a lone surrogate (it has no UTF-8 form).
Invariant: ``parse_input`` returns such a value or raises ``InputRefused``, nothing else, and
never recurses deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import json
import math

from threads.log.canonical import (
    MAX_DEPTH,
    MAX_SAFE_INT,
    JsonValue,
    deeper_than,
    no_duplicate_keys,
    reject_constant,
)

SHOWN = 40  # characters of an offending literal quoted back


class InputRefused(ValueError):  # noqa: N818 - it names the outcome
    """Why the text was refused, in words for whoever sent it (``str(error)``)."""


def parse_input(raw: bytes) -> JsonValue:
    """The value of the JSON text ``raw``, when the log can hold it (see the module)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputRefused(f"it is not UTF-8 ({exc.reason})") from None
    if deeper_than(raw):
        raise InputRefused(f"it nests arrays and objects deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(
            text, object_pairs_hook=no_duplicate_keys, parse_constant=reject_constant,
            parse_int=_exact_int, parse_float=_finite_float,
        )
    except ValueError as exc:
        raise InputRefused(f"it is not JSON the log can hold: {exc}") from None
    _refuse_lone_surrogates(value)
    return value


def _exact_int(literal: str) -> int:
    digits = literal.lstrip("-")
    if len(digits) > len(str(MAX_SAFE_INT)) or abs(int(literal)) > MAX_SAFE_INT:
        raise ValueError(
            f"integer {literal[:SHOWN]} is outside ±(2^53-1), the integers the log holds exactly"
        )
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"number {literal[:SHOWN]} is too large for a double")
    mantissa = literal.lower().partition("e")[0]
    if value == 0 and any(digit in mantissa for digit in "123456789"):
        raise ValueError(f"number {literal[:SHOWN]} is too small for a double (it reads as 0)")
    return value


def _refuse_lone_surrogates(value: JsonValue) -> None:
    if isinstance(value, str):
        _encodable(value)
    elif isinstance(value, list):
        for item in value:
            _refuse_lone_surrogates(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _encodable(key)
            _refuse_lone_surrogates(item)


def _encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        raise InputRefused(
            f"a string holds a lone surrogate (\\u{code:04x}), which has no UTF-8 form"
        ) from None
