"""Render v1: the neutral, hashable bytes of the model request a log implies (LOG-FORMAT §6).

Line 0 is the declared prefix: adapter, model and params of the settings epoch in force (the
pinned ones until a ``settings_changed``), the pinned system text and the pinned tools (a
deferred tool shows only its name and description). Then one line per model-visible event, in
log order: user input and steers as recorded, injected context inside its reference wrapper,
heartbeats, model responses, tool results (late ones marked), and a line with the new tool set
for every ``tools_changed``, so line 0 never changes within an epoch (C7). Every line is
canonical JSON ending in ``\\n``; a ``model_request`` stores exactly these bytes. They are
handed out in the pieces they are made of (``threads.log.request_bytes``): joined only where
whole bytes are needed, and, while the lines stay in order, as the request rendered before
plus the lines added since, so a render costs what the new lines cost. A cache set going on
from a recorded request (``RenderCache.resumed``: ``threads.log.render_resume``) renders from
that request's bytes and the events after it, while it can show them exact.

Every artifact a rendered part references (images, reasoning blocks, injected text) must be
present and intact, and text must be UTF-8: else ``artifact_missing`` / ``artifact_corrupt`` at
the event that carries it, and no request is made. Invariant: the bytes are a pure function of
the events before the request and those artifacts' bytes; nothing here does I/O.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast

from threads.errors import LogError
from threads.log.canonical import fast_loads
from threads.log.hashing import sha256_hex
from threads.log.json_types import JsonObject
from threads.log.lines import Event
from threads.log.render_context import Edits, style_body, summary_body, summary_instruction
from threads.log.render_lines import (
    AssistantLine,
    DeclaredPrefix,
    Line,
    Message,
    PrefixTool,
    ToolLine,
    ToolsLine,
    UserLine,
    line_bytes,
)
from threads.log.request_bytes import Extends, RequestBytes
from threads.log.snapshot import Snapshot
from threads.log.vocabulary import ArtifactRef, ToolSpec, data_of
from threads.log.vocabulary import ModelRequestDataDeclaredPrefix as PrefixDigest

MEDIA_TYPE = "application/x-ndjson"
TOOLS_ROLE: Final = "tools"  # the line a tools_changed renders: the complete new set
Artifacts = Mapping[str, bytes]  # sha256 -> bytes, for the artifacts rendering reads

# parts of a response an omit_prior settings epoch drops from later renders
_CARRYOVER_PARTS = frozenset({"reasoning", "hosted_tool"})
_INPUT_HOOK = "before_input"
_DENYING = frozenset({"deny", "failed"})


def denied_input(decision: Mapping[str, Any]) -> str | None:
    """The input event a ``hook_decision`` keeps out of the conversation: a ``before_input``
    hook that denied it (or failed) names it; None for any other decision."""
    if decision["hook"] == _INPUT_HOOK and decision["decision"] in _DENYING:
        return str(decision.get("input_event_id", ""))
    return None


class Resumable(Protocol):
    """Renders on from a request recorded earlier (``threads.log.render_resume``): the request
    ``events`` imply next, or None once that can't be shown exact without the lines before;
    ``flat`` is the request it rendered last, ``tail`` the render state after it."""

    flat: _Flat
    tail: _Lines

    def render(
        self, started: Mapping[str, Any], events: Sequence[Event], artifacts: Artifacts
    ) -> Rendered | None: ...


@dataclass(frozen=True, slots=True)
class Rendered:
    body: RequestBytes  # the request's bytes, in the pieces the render made them of
    prefix_bytes: int
    prefix_sha256: str
    prefix: DeclaredPrefix
    messages: Snapshot[Message]  # the conversation lines after line 0, for an adapter
    part_types: frozenset[str]  # the ``type`` of every content part in ``messages``

    @property
    def data(self) -> bytes:
        """The whole request (joined on each use: a store keeping deltas needs only ``body``)."""
        return bytes(self.body)

    @property
    def sha256(self) -> str:
        return self.body.sha256

    def request_ref(self) -> ArtifactRef:
        return {"bytes": self.body.size, "media_type": MEDIA_TYPE, "sha256": self.body.sha256}

    def declared_prefix(self) -> PrefixDigest:
        return {"bytes": self.prefix_bytes, "sha256": self.prefix_sha256}


def prefix_tool(spec: ToolSpec) -> PrefixTool:
    """How a ToolSpec shows in Render v1: a deferred tool only by name and description."""
    if spec.get("defer_loading"):
        return {"deferred": True, "description": spec["description"], "name": spec["name"]}
    return {
        "description": spec["description"],
        "input_schema": spec["input_schema"],
        "name": spec["name"],
    }


def declared_prefix(
    started: Mapping[str, Any], settings: Mapping[str, Any] | None = None
) -> DeclaredPrefix:
    """Line 0 under ``settings`` (a settings_changed's ``settings``; None: as pinned)."""
    source = settings if settings is not None else started
    return {
        "adapter": source["adapter"],
        "model": source["model"],
        "params": source["model_params"],
        "system": started["instructions"],
        "tools": [prefix_tool(spec) for spec in started.get("tools", [])],
    }


def prefix_line(started: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> bytes:
    return line_bytes(declared_prefix(started, settings))


def prefix_digest(line: bytes) -> JsonObject:
    """``declared_prefix`` of a model_request whose line 0 is ``line`` (newline included)."""
    return {"bytes": len(line), "sha256": sha256_hex(line)}


# ---- artifacts -------------------------------------------------------------------------------


def _part_refs(parts: Sequence[Mapping[str, Any]] | None) -> Iterator[ArtifactRef]:
    for part in parts or []:
        if isinstance(part.get("ref"), dict):
            yield part["ref"]


def event_refs(event: Event) -> list[ArtifactRef]:
    """The artifacts rendering ``event`` reads or verifies. A tool result's own ``ref`` (the
    spilled full output) is not among them: without content the model sees the preview."""
    kind = event.type
    if kind in ("user_input", "steer", "tool_result", "tool_result_late", "model_response",
                "model_response_recovered"):
        return list(_part_refs(_content(event)))
    if kind == "injected":
        ref = data_of(event, "injected").get("ref")
        return [ref] if ref is not None else []
    if kind == "compacted":
        return [data_of(event, "compacted")["summary_ref"]]
    return []


def _content(event: Event) -> Sequence[Mapping[str, Any]] | None:
    """The content parts of an event that carries them (None when it has none)."""
    content = event.data.get("content")
    return cast("Sequence[Mapping[str, Any]]", content) if isinstance(content, list) else None


def _verified(event: Event, ref: ArtifactRef, artifacts: Artifacts) -> bytes:
    data = artifacts.get(ref["sha256"])
    if data is None:
        raise LogError(
            "artifact_missing", f"{event.type} references artifact {ref['sha256']}, which the "
            "store does not hold; restore it (or import it) before rendering", seq=event.seq,
        )
    if len(data) != ref["bytes"] or sha256_hex(data) != ref["sha256"]:
        raise LogError(
            "artifact_corrupt", f"artifact {ref['sha256']} does not match its length or hash",
            seq=event.seq,
        )
    return data


def _text(event: Event, ref: ArtifactRef, artifacts: Artifacts) -> str:
    try:
        return _verified(event, ref, artifacts).decode("utf-8")
    except UnicodeDecodeError:
        raise LogError(
            "artifact_corrupt", f"artifact {ref['sha256']} holds text that is not UTF-8; text is"
            " never decoded lossily", seq=event.seq,
        ) from None


# ---- lines -----------------------------------------------------------------------------------


def _user(text: str) -> UserLine:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _injected(event: Event, artifacts: Artifacts) -> UserLine:
    data = data_of(event, "injected")
    ref = data.get("ref")
    text = data.get("text", "") if ref is None else _text(event, ref, artifacts)
    if data["source"] == "output_style":
        return _user(style_body(data["origin"]["id"], text))
    if data["trust"] != "untrusted_reference":
        return _user(text)
    return _user(
        f'<reference source="{data["source"]}" id="{data["origin"]["id"]}" untrusted="true">\n'
        f"{text}\n</reference>"
    )


def _result(event: Event, *, late: bool) -> ToolLine:
    data = data_of(event, "tool_result_late" if late else "tool_result")
    content = data.get("content")
    line: ToolLine = {
        "role": "tool",
        "call_id": data["call_id"],
        "is_error": data["is_error"],
        "content": content or [{"type": "text", "text": data["preview"]}],
    }
    if late:
        line["late"] = True
    return line


def _summary(event: Event, artifacts: Artifacts) -> UserLine:
    ref = data_of(event, "compacted")["summary_ref"]
    return _user(summary_body(_text(event, ref, artifacts), ref["sha256"]))


def _line(event: Event, artifacts: Artifacts) -> Line | None:
    """The Render v1 line of one event, or None for an event the model does not see."""
    for ref in event_refs(event):
        _verified(event, ref, artifacts)
    if event.type in ("user_input", "steer"):
        said = data_of(event, event.type)
        user: UserLine = {
            "role": "user",
            "content": said.get("content") or [{"type": "text", "text": said.get("text", "")}],
        }
        return user
    if event.type in ("model_response", "model_response_recovered"):
        reply = data_of(event, event.type)["content"]
        response: AssistantLine = {"role": "assistant", "content": reply}
        return response
    if event.type == "tool_result":
        return _result(event, late=False)
    if event.type == "tool_result_late":
        return _result(event, late=True)
    if event.type == "injected":
        return _injected(event, artifacts)
    if event.type == "heartbeat":
        running = ", ".join(data_of(event, "heartbeat")["running_call_ids"])
        return _user(f"<heartbeat>\nrunning: {running}\n</heartbeat>")
    if event.type == "tools_changed":
        specs = data_of(event, "tools_changed")["tools"]
        tools: ToolsLine = {"role": TOOLS_ROLE, "tools": [prefix_tool(s) for s in specs]}
        return tools
    if event.type == "compacted":
        return _summary(event, artifacts)
    return None


def _without_carryover(line: Line) -> Line | None:
    if line["role"] != "assistant":
        return line  # only a response carries reasoning or hosted tool parts
    kept = [part for part in line["content"] if part["type"] not in _CARRYOVER_PARTS]
    if not kept:
        return None
    response: AssistantLine = {"role": "assistant", "content": kept}
    return response


@dataclass(slots=True)
class _Entry:
    seq: int  # where the line stands; a compaction summary stands at the start of its range
    event_id: str
    line: Line
    data: bytes
    carryover: bool  # holds reasoning / hosted_tool parts
    origin: int = 0  # seq of the event that made the line (a summary's: its compacted)

    def hidden_by(self, start: int, end: int, by: int) -> bool:
        """A compaction at seq ``by`` of ``start..end`` drops this line (a summary made
        before it, too: compactions nest)."""
        return start <= self.seq <= end and by > (self.origin or self.seq)


@dataclass(slots=True)
class _Lines:
    """The lines rendered so far and what hides or changes them later."""

    entries: list[_Entry] = field(default_factory=list)
    denied_inputs: set[str] = field(default_factory=set)
    compaction_requests: set[str] = field(default_factory=set)
    compacted: list[tuple[int, int, int]] = field(default_factory=list)  # from, to, at seq
    edits: Edits = field(default_factory=Edits)
    settings: Mapping[str, Any] | None = None
    omit_before: int = 0

    def feed(self, event: Event, artifacts: Artifacts) -> None:
        data = event.data
        if event.type == "settings_changed":
            settings = data_of(event, "settings_changed")["settings"]
            self.settings = settings
            if settings["reasoning_carryover"] == "omit_prior":
                self.omit_before = event.seq
            return
        if event.type == "hook_decision":
            denied = denied_input(data)
            if denied is not None:
                self.denied_inputs.add(denied)
            return
        if event.type == "context_edited":
            self.edits.add(event)
            return
        if event.type == "model_request" and data.get("purpose") == "compaction":
            self.compaction_requests.add(event.event_id)
            return
        if event.type in ("model_response", "model_response_recovered") and (
            data["request_event_id"] in self.compaction_requests
        ):
            return
        line = _line(event, artifacts)
        if line is None:
            return
        raw = line_bytes(line)
        carryover = line["role"] == "assistant" and any(
            p["type"] in _CARRYOVER_PARTS for p in line["content"]
        )
        if event.type != "compacted":
            self.entries.append(_Entry(event.seq, event.event_id, line, raw, carryover))
            return
        compacted = data_of(event, "compacted")
        start, end = compacted["from_seq"], compacted["to_seq"]
        self.compacted.append((start, end, event.seq))
        # the summary, then the tool set in force at the range's end (its last tools line)
        made = [_Entry(start, event.event_id, line, raw, False, event.seq)]
        tools = [e for e in self.entries if start <= e.seq <= end and e.line["role"] == TOOLS_ROLE]
        if tools:
            made.append(_Entry(start, tools[-1].event_id, tools[-1].line, tools[-1].data, False,
                               event.seq))
        at = bisect_left([entry.seq for entry in self.entries], start)
        self.entries[at:at] = made

    def lines(self, start: int = 0) -> Iterator[tuple[Line, bytes]]:
        """The lines of ``entries[start:]`` as a request shows them now."""
        for entry in self.entries[start:]:
            shown = self.shown(entry)
            if shown is not None:
                yield shown

    def shown(self, entry: _Entry) -> tuple[Line, bytes] | None:
        """How ``entry`` shows in a request now (None: not at all)."""
        if entry.event_id in self.denied_inputs:
            return None
        if any(entry.hidden_by(a, b, by) for a, b, by in self.compacted):
            return None
        if entry.line["role"] == "tool" and self.edits.touches(entry.line):
            edited = self.edits.apply(entry.line)
            return edited, line_bytes(edited)
        if entry.carryover and entry.seq < self.omit_before:
            kept = _without_carryover(entry.line)
            return None if kept is None else (kept, line_bytes(kept))
        return entry.line, entry.data

    def in_order(self) -> bool:
        """Every entry renders as recorded, in order: nothing hidden, moved or rewritten, so
        the request only ever grows by the entries appended since the last one."""
        return (
            not self.denied_inputs and not self.compacted and not self.omit_before
            and not self.edits
        )


@dataclass(slots=True)
class _Flat:
    """The last request rendered from an in-order ``_Lines``, kept to be extended: its line
    0, the entries it holds, its bytes so far, their length and running hash, and the lines an
    adapter gets. Parts and lines are only ever appended to, so what an earlier request handed
    out of them (``RequestBytes``, ``Snapshot``) stays true."""

    settings: Mapping[str, Any] | None
    first: bytes
    first_sha256: str
    prefix: DeclaredPrefix
    entries: int
    parts: list[bytes]
    starts: list[int]  # where each part starts in the bytes
    size: int
    hasher: Any  # hashlib's sha256 object
    messages: list[Message]
    part_types: set[str]
    last: RequestBytes | None = None  # the request this was last rendered as

    def extend(self, raws: Sequence[bytes]) -> None:
        """Append lines (their bytes). What an adapter gets of each is the JSON value of those
        bytes, read back (in one decoder call for them all): the same values, with the same
        key order, however the line was made, whether from an event appended in this process
        or read back from the store, rendered now or recorded by an earlier run."""
        if not raws:
            return
        for raw in raws:
            self.parts.append(raw)
            self.starts.append(self.size)
            self.size += len(raw)
            self.hasher.update(raw)
        self.add_all(fast_loads(b"[" + b",".join(raws) + b"]"))

    def body(self) -> RequestBytes:
        """The request as it stands, as extending the one rendered before it (if any)."""
        last = self.last
        base = None if last is None else Extends(last.sha256, last.size, last.count)
        body = RequestBytes(
            self.parts, self.starts, len(self.parts), self.size, self.hasher.hexdigest(), base
        )
        self.last = body
        return body

    def add_all(self, lines: Sequence[Line]) -> None:
        """Hand ``lines`` to an adapter (a tools line changes the set it sends: it takes that
        separately)."""
        messages = [line for line in lines if line["role"] != TOOLS_ROLE]
        self.messages.extend(messages)
        self.part_types.update(part["type"] for line in messages for part in line["content"])


class RenderCache:
    """What a run has already rendered. The log only grows and events never change, so each
    request renders only the events appended since the previous one, and (while the lines
    stay in order) hashes only their bytes."""

    def __init__(self) -> None:
        self._last: Event | None = None  # the last event fed, to recognise a longer log
        self._seen = 0
        self._lines = _Lines()
        self.flat: _Flat | None = None
        # A recorded request to render on from (``threads.log.render_resume``), while it holds
        self.resumed: Resumable | None = None

    @property
    def lines(self) -> _Lines:
        """The render state after the events fed so far."""
        return self._lines

    def feed(self, events: Sequence[Event], artifacts: Artifacts) -> _Lines:
        grown = len(events) >= self._seen and (
            self._seen == 0 or events[self._seen - 1] is self._last
        )
        if not grown:
            self._seen, self._lines, self.flat = 0, _Lines(), None
        for event in events[self._seen :]:
            self._lines.feed(event, artifacts)
        self._seen = len(events)
        self._last = events[-1] if events else None
        return self._lines


def _flat(started: Mapping[str, Any], rendered: _Lines, last: _Flat | None) -> _Flat:
    """The request ``rendered`` implies: ``last`` extended when that is exact, else anew."""
    if last is not None and last.settings is rendered.settings and rendered.in_order():
        last.extend([entry.data for entry in rendered.entries[last.entries :]])
        last.entries = len(rendered.entries)
        return last
    first = prefix_line(started, rendered.settings)
    flat = _Flat(
        rendered.settings,
        first,
        sha256_hex(first),
        declared_prefix(started, rendered.settings),
        len(rendered.entries),
        [first],
        [0],
        len(first),
        hashlib.sha256(first),
        [],
        set(),
    )
    flat.extend([raw for _, raw in rendered.lines()])
    return flat


def render(
    started: Mapping[str, Any],
    events: Sequence[Event],
    artifacts: Artifacts | None = None,
    cache: RenderCache | None = None,
) -> Rendered:
    """The request the log ``events`` implies next (``started`` is the thread_started data)."""
    cache = cache if cache is not None else RenderCache()
    if cache.resumed is not None:
        rendered = cache.resumed.render(started, events, artifacts or {})
        if rendered is not None:
            return rendered
        cache.resumed = None  # it no longer holds: every line is rendered from here on
    flat = cache.flat = _flat(started, cache.feed(events, artifacts or {}), cache.flat)
    return _rendered(flat)


def render_summary_request(
    started: Mapping[str, Any],
    events: Sequence[Event],
    artifacts: Artifacts | None,
    guides: Sequence[str],
    cause: Event | None = None,
) -> Rendered:
    """A summarizer's request (``purpose: compaction``) after ``events``: the request a turn
    would send, then one user line asking for the summary. Serving an operator's
    ``compaction_requested`` (``cause``), the history stops at that request (later context
    edits and settings still apply) and its instructions join the ask."""
    if cause is not None:
        late = ("context_edited", "settings_changed")
        events = [e for e in events if e.seq <= cause.seq or e.type in late]
    lines = _Lines()
    for event in events:
        lines.feed(event, artifacts or {})
    flat = _flat(started, lines, None)
    instructions = (
        data_of(cause, "compaction_requested").get("instructions") if cause is not None else None
    )
    ask = _user(summary_instruction(guides, instructions))
    flat.extend([line_bytes(ask)])
    return _rendered(flat)


def _rendered(flat: _Flat) -> Rendered:
    return Rendered(
        flat.body(),
        len(flat.first),
        flat.first_sha256,
        flat.prefix,
        Snapshot(flat.messages),
        frozenset(flat.part_types),
    )
