"""Line admission: the checks one log line must pass on its own, before any cross-line check.

Order (spec §1): strict parse (UTF-8, depth, size, duplicate keys, safe ints) and canonical
byte equality, then format admission for lines carrying ``format`` (Header / Head), then the
schema (with the critical rule for unknown events). Invariant: ``admit_line`` either returns
a typed value built from exactly ``raw`` or raises a ``LogError`` naming the seq the problem
belongs to (0 for a header, the head's own seq for a head, else the line's position).

A writer admits its own lines with ``encode_admitted``: a line the canonical encoder wrote needs
no byte-equality round trip and can hold no duplicate key, so what is left is size, depth, safe
integers and the schema of the value read back from its bytes (``parse_written``). The
last lines admitted either way are remembered by their bytes, so the store's own admission of a
line its writer just admitted is a lookup, with the same verdict.
"""

from __future__ import annotations

import threading
from typing import Unpack, cast

from threads.errors import LogError
from threads.log.canonical import admit_canonical, parse_written
from threads.log.json_types import JsonObject, JsonValue
from threads.log.lines import (
    FORMAT_HEAD,
    FORMAT_LOG,
    FORMAT_VERSION,
    Event,
    EventFields,
    Head,
    Header,
    event_from_value,
    event_line,
    header_from_value,
)
from threads.log.schema import validate_event, validate_head, validate_header

Line = Header | Event | Head

_REMEMBERED = 64  # admitted event lines kept by their bytes (a step writes a handful)
_REMEMBERED_LINE_BYTES = 64 * 1024  # longer lines are admitted again: memory stays small
_admitted: dict[bytes, Event] = {}
_admitted_lock = threading.Lock()


def _remember(event: Event) -> Event:
    if len(event.line) <= _REMEMBERED_LINE_BYTES:
        with _admitted_lock:
            _admitted[event.line] = event
            if len(_admitted) > _REMEMBERED:
                del _admitted[next(iter(_admitted))]
    return event


def admit_line(raw: bytes, *, position_seq: int) -> Line:
    """Admit one line (without its ``\\n``). ``position_seq`` is the seq the line would have if
    it were the next event: the seq reported when the line cannot be read at all."""
    known = _admitted.get(raw)
    if known is not None:
        return known
    value = admit_canonical(raw, seq=position_seq)
    if not isinstance(value, dict):
        message = f"a line must be a JSON object, not {_json_kind(value)}"
        raise LogError("invalid_line", message, seq=position_seq)
    if "format" in value:
        return _admit_formatted(value, raw, position_seq)
    validate_event(value, seq=position_seq)
    return _remember(event_from_value(value, raw))


def encode_admitted(**fields: Unpack[EventFields]) -> Event:
    """Write one event line in canonical form (as ``encode_event``) and admit it: the same
    verdict ``admit_line`` gives its bytes, without re-reading them as a stranger's."""
    line = event_line(**fields)
    seq = fields["seq"]
    # The schema sees the value as any reader will (a tuple read back is a list, 2.0 is 2).
    read_back = parse_written(line, seq=seq)
    validate_event(read_back, seq=seq)
    return _remember(event_from_value(read_back, line))


def _admit_formatted(value: JsonObject, raw: bytes, position_seq: int) -> Header | Head:
    fmt = value["format"]
    if fmt == FORMAT_LOG:
        _admit_version(value, "header", seq=0)
        validate_header(value, seq=0)
        return header_from_value(value, raw)
    if fmt == FORMAT_HEAD:
        seq = value.get("seq")
        head_seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else position_seq
        _admit_version(value, "head", seq=head_seq)
        validate_head(value, seq=head_seq)
        # the schema pinned their types (Head: a branch id, a seq, a hash)
        branch_id, head_hash = cast(str, value["branch_id"]), cast(str, value["hash"])
        return Head(branch_id, cast(int, value["seq"]), head_hash)
    shown = repr(fmt) if isinstance(fmt, str) else _json_kind(fmt)
    # Position rule: at the start of an export the position is the header slot, seq 0.
    raise LogError(
        "invalid_line",
        f"unknown line format {shown}; expected {FORMAT_LOG!r} or {FORMAT_HEAD!r}",
        seq=position_seq,
    )


def _admit_version(value: JsonObject, what: str, *, seq: int) -> None:
    """A newer integer version means a newer writer (unsupported_format); anything else that is
    not a positive integer is a broken line (invalid_line)."""
    version = value.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version <= 0:
        raise LogError(
            "invalid_line", f"{what} format_version must be a positive integer, got {version!r}",
            seq=seq,
        )
    if version > FORMAT_VERSION:
        raise LogError(
            "unsupported_format",
            f"{what} format_version {version} is newer than this reader ({FORMAT_VERSION}); "
            "open it with a newer threads",
            seq=seq,
        )


def _json_kind(value: JsonValue) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")

