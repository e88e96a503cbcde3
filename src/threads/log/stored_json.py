"""Reading stored lines back: the JSON parse a store's reads use, orjson when installed.

Stored lines were admitted when written (canonical RFC 8785, strict UTF-8, no duplicate keys),
so any conforming parser reads them alike, except for integer literals past 2^53-1, which
admission reads as doubles and orjson as integers. orjson (the ``fast`` extra, several times
quicker, else the standard library) reads every line without a run of 16 digits ending where
an integer literal ends (``may_hold_unsafe_integer``: no such literal can hide there), a batch
of them in one C loop; ``parse_stored`` (the standard library, reading numbers as admission
does) reads the others, and any line orjson refuses. Admission itself (``parse_strict``) never
uses this: it must see duplicate keys and every spelling rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from threads.log.canonical import (
    fast_loads,
    lines_holding_digit_runs,
    may_hold_unsafe_integer,
    parse_stored,
)


class UndecodedLineError(ValueError):
    """The line at ``index`` of a batch (``StoredReader.lines``) does not parse."""

    def __init__(self, index: int) -> None:
        super().__init__(f"line {index} of the batch does not parse")
        self.index = index


class StoredReader:
    """Parses stored lines with ``fast`` (orjson's or the standard ``loads``) where it reads
    them as admission did, else with ``parse_stored``."""

    def __init__(self, fast: Callable[[bytes], Any]) -> None:
        self._fast = fast

    def line(self, raw: bytes) -> Any:
        if may_hold_unsafe_integer(raw):
            return parse_stored(raw)
        try:
            return self._fast(raw)
        except ValueError:  # orjson.JSONDecodeError is a ValueError: the standard one decides
            return parse_stored(raw)

    def lines(self, lines: Sequence[bytes]) -> list[Any]:
        """Each line read as ``line`` reads it, from one scan of them all for digit runs; the
        first that does not parse raises ``UndecodedLineError``."""
        runs, fast = lines_holding_digit_runs(lines), self._fast
        if not runs:
            try:
                return list(map(fast, lines))  # the usual batch: one C loop
            except ValueError:
                pass  # the loop below finds the line, and lets the standard one decide
        values = []
        for index, raw in enumerate(lines):
            if index not in runs:
                try:
                    values.append(fast(raw))
                    continue
                except ValueError:
                    pass  # the standard one decides
            try:
                values.append(parse_stored(raw))
            except ValueError:
                raise UndecodedLineError(index) from None
        return values


_READER = StoredReader(fast_loads)
loads_stored: Callable[[bytes], Any] = _READER.line
loads_stored_lines: Callable[[Sequence[bytes]], list[Any]] = _READER.lines
