"""Reading stored lines back: the JSON parse a store's reads use, orjson when installed.

Stored lines were admitted when written (canonical RFC 8785, strict UTF-8, no duplicate keys),
so any conforming parser reads them alike, except for integer literals past 2^53-1, which
admission reads as doubles and orjson as integers. orjson (the ``fast`` extra, several times
quicker, else the standard library) reads every line without a run of 16 digits (no such
literal can hide there); ``parse_stored`` (the standard library, reading numbers as admission
does) reads the others, and any line orjson refuses. Admission itself (``parse_strict``) never
uses this: it must see duplicate keys and every spelling rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from threads.log.canonical import fast_loads, may_hold_unsafe_integer, parse_stored


def _reader(fast: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse(raw: bytes) -> Any:
        if may_hold_unsafe_integer(raw):
            return parse_stored(raw)
        try:
            return fast(raw)
        except ValueError:  # orjson.JSONDecodeError is a ValueError: the standard one decides
            return parse_stored(raw)

    return parse


loads_stored: Callable[[bytes], Any] = _reader(fast_loads)
