"""Rendering a continuing run's next request on from one it recorded (a request checkpoint),
without rendering the lines before it.

A ``RequestCheckpoint`` is what a turn's ``model_request`` rendered: the request's bytes (its
``request_ref`` addresses them) and the render state those bytes were made under, namely the
settings epoch in force, the inputs a ``before_input`` hook kept out, and the context edits
recorded so far. ``checkpoint_of`` takes one from a run's render cache once the request is
recorded; ``encode``/``decode`` are its own versioned bytes (``FORMAT``), kept by a store beside
the branch's fold snapshot (``threads.store.fold_open``).

``resume`` checks a checkpoint against the log it is to continue (the request is that event of
that log, its bytes hash to its ``request_ref``, their line 0 is the declared prefix of the
settings it names) and gives a ``Resumed`` renderer, set on a ``RenderCache``: the next request
is then the checkpoint's lines, unchanged, plus the lines of the events after the request.
That holds while nothing after the request rewrites a line before it, so the renderer answers
None (and the cache renders every line again) at the first event that may: a ``compacted``
(its summary hides earlier lines), a ``settings_changed`` (line 0, dropped reasoning), a hook
denying an input recorded before the request, or a context edit of a result recorded before
it. Invariant: what ``Resumed.render`` returns is byte for byte, and line for line, what
``render`` of the whole log returns (the equivalence test in ``tests/log``).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import accumulate
from pathlib import Path
from typing import Any, cast

from threads.log.canonical import compact_dumps, fast_loads
from threads.log.fold.compaction import is_side_request
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.log.render import (
    Artifacts,
    RenderCache,
    Rendered,
    _Flat,
    _Lines,
    _rendered,
    declared_prefix,
    denied_input,
    prefix_line,
)
from threads.log.render_context import Edits
from threads.log.render_lines import Line
from threads.log.request_bytes import RequestBytes
from threads.log.vocabulary import data_of

__all__ = ["FORMAT", "CheckpointUnusableError", "RequestCheckpoint", "Resumed", "checkpoint_of",
           "render_code", "resume"]

FORMAT = 1  # the checkpoint's bytes; a reader of another refuses them
_ZLIB_LEVEL = 1
# the modules whose code decides a request's bytes: a checkpoint another version of them wrote
# is refused, as they could render the same events to other bytes
_RENDER_MODULES = ("canonical", "render", "render_context", "render_lines", "render_resume",
                   "request_bytes")


class CheckpointUnusableError(Exception):
    """Bytes that are not a checkpoint this code wrote: render every line instead."""


@dataclass(frozen=True, slots=True)
class RequestCheckpoint:
    """What turn request ``event_id`` (at ``seq``) rendered: its bytes ``body`` (sha256
    ``sha256``) under settings ``settings`` (a ``settings_changed``'s; None: as pinned), with
    the reasoning of responses before ``omit_before`` dropped, the inputs ``denied`` kept out
    and the context edits ``cleared`` / ``spans`` applied."""

    seq: int
    event_id: str
    sha256: str
    settings: Mapping[str, Any] | None
    omit_before: int
    denied: frozenset[str]
    cleared: frozenset[str]
    spans: tuple[tuple[str, int, tuple[tuple[int, int], ...]], ...]
    body: RequestBytes

    def encode(self) -> bytes:
        """A line of JSON (sorted keys), then the request's bytes, zlib compressed (quickly: an
        open of the branch's state reads and hashes them with the fold row)."""
        head = {
            "format": FORMAT,
            "render_code": render_code(),
            "request": [self.seq, self.event_id, self.sha256],
            "settings": self.settings,
            "omit_before": self.omit_before,
            "denied": sorted(self.denied),
            "cleared": sorted(self.cleared),
            "spans": [[call, part, [list(s) for s in spans]] for call, part, spans in self.spans],
        }
        return compact_dumps(head) + b"\n" + zlib.compress(bytes(self.body), _ZLIB_LEVEL)

    @classmethod
    def decode(cls, raw: bytes) -> RequestCheckpoint:
        """``CheckpointUnusableError`` for bytes this code did not write."""
        try:
            line, _, packed = raw.partition(b"\n")
            head = fast_loads(line)
            if head.get("format") != FORMAT:
                raise CheckpointUnusableError(f"checkpoint format {head.get('format')!r}")
            if head.get("render_code") != render_code():
                raise CheckpointUnusableError("checkpoint written by other render code")
            seq, event_id, sha256 = head["request"]
            spans = tuple(
                (str(call), int(part), tuple((int(s), int(e)) for s, e in pairs))
                for call, part, pairs in head["spans"]
            )
            data = zlib.decompress(packed)
            body = RequestBytes([data], [0], 1, len(data), str(sha256))
            return cls(int(seq), str(event_id), str(sha256), head["settings"],
                       int(head["omit_before"]), frozenset(head["denied"]),
                       frozenset(head["cleared"]), spans, body)
        except CheckpointUnusableError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, zlib.error) as exc:
            raise CheckpointUnusableError(f"checkpoint does not decode ({exc!r})") from None

    def edits(self) -> Edits:
        return Edits(set(self.cleared), {(c, p): list(s) for c, p, s in self.spans})


@cache
def render_code() -> str:
    """The sha256 of the source of the modules that decide a request's bytes."""
    here = Path(__file__).parent
    return sha256_hex(b"\0".join((here / f"{name}.py").read_bytes() for name in _RENDER_MODULES))


def is_turn_request(event: Event) -> bool:
    """A ``model_request`` of a turn, not a summarizer's."""
    return event.type == "model_request" and not is_side_request(event)


def checkpoint_of(cache: RenderCache, request: Event) -> RequestCheckpoint | None:
    """What ``cache`` rendered as turn request ``request`` (just recorded); None when its last
    render is not that request."""
    resumed = cache.resumed
    flat, lines = (cache.flat, cache.lines) if resumed is None else (resumed.flat, resumed.tail)
    body = None if flat is None else flat.last
    ref = request.data.get("request_ref")
    if body is None or not is_turn_request(request) or not isinstance(ref, dict) or (
        ref.get("sha256") != body.sha256
    ):
        return None
    edits = lines.edits
    return RequestCheckpoint(
        request.seq, request.event_id, body.sha256,
        None if lines.settings is None else dict(lines.settings), lines.omit_before,
        frozenset(lines.denied_inputs), frozenset(edits.cleared),
        tuple((c, p, tuple(s)) for (c, p), s in edits.spans.items()), body,
    )


def resume(
    checkpoint: RequestCheckpoint, started: Mapping[str, Any], events: Sequence[Event]
) -> Resumed | None:
    """A renderer going on from ``checkpoint`` over ``events`` (a branch's chain, in order,
    seqs contiguous), or None when the checkpoint is not one of this log's requests exactly
    (see the module docstring)."""
    if not events:
        return None
    at = checkpoint.seq - events[0].seq
    if not 0 <= at < len(events):
        return None
    request = events[at]
    ref = request.data.get("request_ref")
    if (
        request.event_id != checkpoint.event_id or not is_turn_request(request)
        or not isinstance(ref, dict) or ref.get("sha256") != checkpoint.sha256
    ):
        return None
    data = bytes(checkpoint.body)
    if len(data) != ref.get("bytes") or sha256_hex(data) != checkpoint.sha256:
        return None
    first = prefix_line(started, checkpoint.settings)
    if not data.startswith(first):
        return None
    try:
        base = _base(started, checkpoint, data, first)
    except (ValueError, KeyError, TypeError):
        return None
    return Resumed(checkpoint, base, at + 1, request)


def _base(
    started: Mapping[str, Any], checkpoint: RequestCheckpoint, data: bytes, first: bytes
) -> _Flat:
    """The checkpoint's request as a renderer's state, to extend: its lines as parts, and
    what an adapter gets of them (line 0 and tools lines aside)."""
    parts = data.splitlines(keepends=True)
    starts = [0, *accumulate(map(len, parts[:-1]))]
    settings = checkpoint.settings
    flat = _Flat(
        settings, first, sha256_hex(first), declared_prefix(started, settings), 0, parts, starts,
        len(data), hashlib.sha256(data), [], set(),
    )
    flat.add_all(cast("list[Line]", fast_loads(b"[" + b",".join(parts[1:]) + b"]")))
    flat.last = RequestBytes(parts, starts, len(parts), len(data), checkpoint.sha256)
    return flat


class Resumed:
    """Renders a log's next requests from a checkpoint and the events after it (``tail``: the
    render state of those events, with the checkpoint's denials and edits); ``flat`` is the
    last request rendered."""

    def __init__(
        self, checkpoint: RequestCheckpoint, base: _Flat, start: int, request: Event
    ) -> None:
        self.checkpoint = checkpoint
        self.flat = base
        # the checkpoint's own parts, hash and lines (``base`` itself is extended in place)
        self._base = (list(base.parts), list(base.starts), base.size, base.hasher.copy(),
                      list(base.messages), set(base.part_types))
        self.tail = _Lines(
            denied_inputs=set(checkpoint.denied), edits=checkpoint.edits(),
            settings=checkpoint.settings, omit_before=checkpoint.omit_before,
        )
        self._start = start  # index of the first event after the request
        self._seen = start
        self._last = request  # the last event gone through
        self._results: set[str] = set()  # calls whose tool_result is after the request
        self._rewritten = False  # a denial or an edit after the request: lines re-rendered

    def render(
        self, started: Mapping[str, Any], events: Sequence[Event], artifacts: Artifacts
    ) -> Rendered | None:
        seen = self._seen
        if len(events) < seen or events[seen - 1] is not self._last:
            return None  # not the log this renderer went through
        for event in events[seen:]:
            if not self._keeps(event):
                return None
            self.tail.feed(event, artifacts)
        self._seen = len(events)
        self._last = events[-1]
        return _rendered(self._flat())

    def _keeps(self, event: Event) -> bool:
        """Whether the checkpoint's lines stay as they are after ``event``."""
        kind = event.type
        if kind in ("compacted", "settings_changed"):
            return False
        if kind == "tool_result":
            self._results.add(data_of(event, "tool_result")["call_id"])
        elif kind == "hook_decision":
            denied = denied_input(event.data)
            if denied is not None:
                self._rewritten = True
                return any(e.event_id == denied for e in self.tail.entries)
        elif kind == "context_edited":
            self._rewritten = True
            edits = data_of(event, "context_edited")["edits"]
            return all(edit["call_id"] in self._results for edit in edits)
        return True

    def _flat(self) -> _Flat:
        """The checkpoint's lines then the tail's as they show now: extended while no denial
        or edit came after the request, else made again from the checkpoint's."""
        tail, flat = self.tail, self.flat
        if self._rewritten:
            parts, starts, size, hasher, messages, part_types = self._base
            flat = _Flat(
                flat.settings, flat.first, flat.first_sha256, flat.prefix, 0, list(parts),
                list(starts), size, hasher.copy(), list(messages), set(part_types),
            )
        shown = map(tail.shown, tail.entries[flat.entries :])
        flat.extend([pair[1] for pair in shown if pair is not None])
        flat.entries = len(tail.entries)
        self.flat = flat
        return flat
