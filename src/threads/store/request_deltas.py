"""Request artifacts kept as deltas, so a conversation's requests take space linear in it: the
rule both stores share (the tables are ``threads.store.sqlite.deltas`` and
``threads.store.postgres.deltas``).

Each ``model_request`` names the whole Render v1 request it sent (``request_ref``), and
consecutive requests of a branch share all but their newest lines. A request is kept as a row
of ``request_deltas``: the sha256 of the *full* request (the address its ``request_ref``
names), the request it is based on (the one the branch's previous ``model_request`` names), how
many leading and trailing bytes it shares with that base, and the bytes in between, zlib
compressed with the end of the base as the dictionary when that pays (the lines a request adds
look like the ones before them; a middle of a few hundred bytes is kept as it is). A row
without a base holds the whole request.

Reading (``rebuild``) rebuilds the bytes from the nearest cached or whole ancestor and checks
them against the address (``artifact_corrupt`` otherwise, ``artifact_missing`` when a base is
gone), so what export, replay and verify see is byte for byte what was hashed. A small cache of
recent requests (``RequestCache``) makes the next request's delta, and a reader going through a
thread in order, cost one row each; ``LatestRequests`` remembers which request each branch's
latest ``model_request`` names, by the head it was true at, so finding a new request's base
costs no query. A rendered request comes as pieces that name the request they extend
(``threads.log.request_bytes``): when that is its base, the row is made from the bytes it adds
and the base's tail, never joining or comparing the whole, so writing a step's request costs
the same at any length of the conversation.

This is not the reference's layout (it keeps every artifact as a full file); on a SQLite store
``threads materialize`` writes request artifacts out in that form.
"""

from __future__ import annotations

import json
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.log.render import MEDIA_TYPE as REQUEST_MEDIA_TYPE
from threads.log.request_bytes import RequestBytes
from threads.store.layout import REQUEST_DELTAS

__all__ = [
    "COLUMNS", "INSERT", "REQUEST_MEDIA_TYPE", "Body", "Delta", "Latest", "LatestRequests",
    "RequestCache", "apply", "delta", "line_request_sha", "rebuild", "request_sha",
]

# A request's bytes, or a rendered request's pieces (joined by ``bytes()`` when needed whole).
Body = bytes | RequestBytes

CACHE_ENTRIES = 64
CACHE_BYTES = 128 * 1024 * 1024
ZLIB_LEVEL = 6
FAST_ABOVE_BYTES = 64 * 1024
ZDICT_BYTES = 32 * 1024  # zlib's window: the most of a base its dictionary can use
SMALL_WBITS = 12  # the 4 KiB window of a small middle's compressor
# A middle shorter than this is kept raw: setting zlib up with the base's tail as its
# dictionary (an adler32 of 32 KiB, tables to clear) cost a tenth of a short read_only step's
# instructions, to save fewer bytes than this.
RAW_BELOW_BYTES = 256


@dataclass(frozen=True, slots=True)
class Delta:
    base_sha256: str | None
    prefix_bytes: int
    suffix_bytes: int
    middle: bytes  # as stored: raw, or zlib with the base's tail as its dictionary
    codec: str  # "raw" | "zlib"
    bytes: int  # the full request's length

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Delta:
        """A row of ``COLUMNS`` (after ``sha256``) as a delta."""
        return cls(row[0], int(row[1]), int(row[2]), bytes(row[3]), str(row[4]), int(row[5]))

    def row(self, sha256: str) -> tuple[Any, ...]:
        """The values ``INSERT`` takes for the request ``sha256``."""
        return (sha256, self.base_sha256, self.prefix_bytes, self.suffix_bytes, self.middle,
                self.codec, self.bytes)


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the longest common prefix of ``a`` and ``b``, at most ``limit``."""
    if b.startswith(a[:limit]):  # the usual case: a request is its base plus new lines
        return limit
    low, high = 0, limit
    while low < high:  # invariant: a[:low] == b[:low]
        mid = (low + high + 1) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    low, high = 0, limit
    while low < high:  # invariant: the last ``low`` bytes agree
        mid = (low + high + 1) // 2
        if a[len(a) - mid : len(a) - low] == b[len(b) - mid : len(b) - low]:
            low = mid
        else:
            high = mid - 1
    return low


def delta(base_sha256: str | None, base: Body | None, body: Body) -> Delta:
    """``body`` as a delta against ``base`` (whole when there is no base or nothing shared).
    Pieces that say they extend this very base (its sha256 and length) make the delta from the
    bytes they add and the base's tail alone: the same row, at a cost independent of the
    conversation's length."""
    if base is None or base_sha256 is None:
        data = bytes(body)
        return _packed(None, 0, 0, data, base=b"", total=len(data))
    if isinstance(body, RequestBytes) and _extends(body, base_sha256, len(base)):
        tail = base.last(ZDICT_BYTES) if isinstance(base, RequestBytes) else base[-ZDICT_BYTES:]
        return _packed(base_sha256, len(base), 0, body.added(), base=tail, total=len(body))
    base, data = bytes(base), bytes(body)
    limit = min(len(base), len(data))
    if data.startswith(base):  # the usual case: the conversation grew by its newest lines
        prefix, suffix = len(base), 0
    else:
        prefix = _common_prefix(base, data, limit)
        suffix = _common_suffix(base, data, limit - prefix)
    if prefix + suffix == 0:
        return _packed(None, 0, 0, data, base=b"", total=len(data))
    middle = data[prefix : len(data) - suffix]
    return _packed(base_sha256, prefix, suffix, middle, base=base, total=len(data))


def _extends(body: RequestBytes, base_sha256: str, base_bytes: int) -> bool:
    """Whether ``body`` says it is request ``base_sha256`` (``base_bytes`` long) plus more."""
    return body.base is not None and body.base.sha256 == base_sha256 and (
        body.base.size == base_bytes > 0
    )


def _packed(
    base_sha256: str | None, prefix: int, suffix: int, middle: bytes, *, base: bytes, total: int
) -> Delta:
    """The delta with its middle compressed when it is long enough to be worth it and that
    saves at least a tenth."""
    if len(middle) < RAW_BELOW_BYTES:
        return Delta(base_sha256, prefix, suffix, middle, "raw", total)
    level = ZLIB_LEVEL if len(middle) <= FAST_ABOVE_BYTES else 1  # a whole request: be quick
    # A middle of a turn or two gets a small window: setting up zlib's full one took longer
    # than compressing it. The dictionary stays the base's tail (``apply`` is unchanged), of
    # which the window sees the last 4 KiB.
    wbits = SMALL_WBITS if len(middle) <= 1 << SMALL_WBITS else zlib.MAX_WBITS
    packer = zlib.compressobj(level, zlib.DEFLATED, wbits, zdict=base[-ZDICT_BYTES:])
    packed = packer.compress(middle) + packer.flush()
    if len(packed) * 10 <= len(middle) * 9:
        return Delta(base_sha256, prefix, suffix, packed, "zlib", total)
    return Delta(base_sha256, prefix, suffix, middle, "raw", total)


def apply(base: bytes, d: Delta) -> bytes:
    """The full request ``d`` was made from, given its base (b"" for a whole request);
    ``zlib.error`` when the stored middle is damaged."""
    middle = d.middle
    if d.codec == "zlib":
        unpacker = zlib.decompressobj(zdict=base[-ZDICT_BYTES:])
        middle = unpacker.decompress(middle) + unpacker.flush()
    suffix = base[len(base) - d.suffix_bytes :] if d.suffix_bytes else b""
    return base[: d.prefix_bytes] + middle + suffix


class RequestCache:
    """Recently written or read requests by sha256, bounded in entries and bytes. A written
    request is kept as the caller's pieces, unjoined (pieces of one conversation share their
    list, so the byte bound counts them more than once: it only ever evicts sooner)."""

    def __init__(self, entries: int = CACHE_ENTRIES, max_bytes: int = CACHE_BYTES) -> None:
        self._items: OrderedDict[str, Body] = OrderedDict()
        self._entries = entries
        self._max_bytes = max_bytes
        self._bytes = 0

    def get(self, sha256: str) -> Body | None:
        data = self._items.get(sha256)
        if data is not None:
            self._items.move_to_end(sha256)
        return data

    def put(self, sha256: str, data: Body) -> None:
        if sha256 in self._items:
            self._items.move_to_end(sha256)
            return
        self._items[sha256] = data
        self._bytes += len(data)
        while len(self._items) > self._entries or (
            self._bytes > self._max_bytes and len(self._items) > 1
        ):
            _, dropped = self._items.popitem(last=False)
            self._bytes -= len(dropped)

    def drop(self, sha256: str) -> None:
        dropped = self._items.pop(sha256, None)
        if dropped is not None:
            self._bytes -= len(dropped)

    def snapshot(self) -> dict[str, Body]:
        """The cached requests as they are now (what a query that runs meanwhile stops at)."""
        return dict(self._items)


COLUMNS = REQUEST_DELTAS.column_names()
# A request already kept (a retried turn, the same first request of two threads) keeps its row.
INSERT = (
    f"INSERT INTO request_deltas({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (sha256) DO NOTHING"
)


def rebuild(
    sha256: str, row: Callable[[str], Delta | None], cached: Callable[[str], Body | None]
) -> bytes | None:
    """The request kept under ``sha256``, rebuilt from its rows (``row``) back to the nearest
    cached (``cached``, bytes known to be right) or whole ancestor and checked against the
    address; None when no row has it."""
    first = row(sha256)
    if first is None:
        return None
    found = cached(sha256)
    if found is not None:
        return bytes(found)
    chain = [first]
    seen = {sha256}  # a loop of bases can only come from editing the table
    current = first.base_sha256
    base = b""
    while current is not None and current not in seen:
        seen.add(current)
        hit = cached(current)
        if hit is not None:
            base = bytes(hit)
            break
        d = row(current)
        if d is None:
            raise StoreError(
                "artifact_missing",
                f"request artifact {sha256} is kept as a delta of {current}, which is gone",
            )
        chain.append(d)
        current = d.base_sha256
    data = base
    try:
        for d in reversed(chain):
            data = apply(data, d)
    except zlib.error:
        data = b""  # damaged stored bytes: reported below as not matching the hash
    if len(data) != first.bytes or sha256_hex(data) != sha256:
        raise StoreError("artifact_corrupt", f"artifact {sha256} does not match its hash")
    return data


def request_sha(data: Mapping[str, Any]) -> str | None:
    """The sha256 of the request a ``model_request``'s data names, if it names one."""
    ref = data.get("request_ref")
    return str(ref["sha256"]) if isinstance(ref, dict) else None


def line_request_sha(line: bytes) -> str | None:
    """``request_sha`` of a stored ``model_request`` line."""
    return request_sha(json.loads(line)["data"])


@dataclass(frozen=True, slots=True)
class Latest:
    """What ``previous_request`` answers for ``branch_id`` while its head is ``head_hash``,
    and whether that request's row is known to be stored."""

    branch_id: str
    head_hash: str
    sha256: str | None
    held: bool


class LatestRequests:
    """The request each branch's latest ``model_request`` names, so the next request's base
    costs no query. Invariant: an entry is recorded only once the append it describes has
    committed, and answers only while the branch's head is the hash it was recorded at; a
    chain ending at that hash holds exactly the events it held then (the hash chain), whoever
    appended in between, so the answer is ``previous_request``'s."""

    def __init__(self, entries: int = 16 * CACHE_ENTRIES) -> None:
        self._items: OrderedDict[str, Latest] = OrderedDict()
        self._entries = entries

    def at(self, branch_id: str, head_hash: str) -> Latest | None:
        latest = self._items.get(branch_id)
        return latest if latest is not None and latest.head_hash == head_hash else None

    @staticmethod
    def after(
        before: Latest | None, events: Sequence[Event], saved: Sequence[str]
    ) -> Latest | None:
        """The entry for a branch once ``events`` (not empty) follow a head ``before``
        describes (None: not known); ``saved``: the requests that append stored."""
        last = events[-1]
        for event in reversed(events):
            if event.type == "model_request":
                sha256 = request_sha(event.data)
                return Latest(last.branch_id, last.hash, sha256, sha256 in saved)
        if before is None:
            return None
        return Latest(last.branch_id, last.hash, before.sha256, before.held)

    def record(self, latest: Latest) -> None:
        """Only for an append that committed (see the class docstring)."""
        self._items[latest.branch_id] = latest
        self._items.move_to_end(latest.branch_id)
        if len(self._items) > self._entries:
            self._items.popitem(last=False)
