"""Sample logs for tests, benchmarks and demos: a tiny writer of valid root and child branches.

``SampleLog`` mints schema-valid events the way the run loop writes them (``encode_event``,
contiguous seq, ``prev_hash`` = hash of the previous line of the segment, one epoch per writer,
each request the Render v1 of the log before it), so what it builds passes full admission,
chaining, the semantic rules of reduce and replay.
Invariant: ``lines()`` / ``export()`` are byte-identical to what a store would hold and export.
"""

from __future__ import annotations

from collections.abc import Iterator

from threads.clock import Clock
from threads.log.event_types import Actor, EventType
from threads.log.hashing import value_hash
from threads.log.ids import uuid7
from threads.log.json_types import JsonObject
from threads.log.lines import Draft, Event, Head, Header, encode_event, make_header
from threads.log.render import RenderCache, render
from threads.log.render_resume import RequestCheckpoint, checkpoint_of
from threads.log.vocabulary import draft

USER: Actor = {
    "kind": "user", "principal": {"issuer": "api", "subject": "alice", "tenant": "local"},
}
HOST: Actor = {"kind": "host"}
MODEL: Actor = {"kind": "model"}

_TOOL: JsonObject = {
    "description": "Read a file from the sandbox workspace.",
    "effect_class": "read_only",
    "input_schema": {
        "additionalProperties": False,
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "type": "object",
    },
    "name": "read_file",
}
_CONFIG: JsonObject = {
    "adapter": {"name": "scripted", "settings": {}, "version": "1"},
    "agent_name": "demo",
    "instructions": "You are a helpful agent.",
    "model": {"name": "scripted-1", "provider": "scripted"},
    "model_params": {"max_tokens": 1024},
    "tools": [_TOOL],
}
class SampleLog:
    """One branch being written: its header, its own events, and (for a child) its parent
    through the fork point. Call ``turn()`` etc. to add events; ``epoch`` may be raised to the
    epoch of a store lease before appending. ``keep_requests=False`` keeps no request's bytes
    (only their hash and size reach the log): a long log built for a benchmark then needs
    memory linear in its lines, not in the sum of its requests (quadratic)."""

    def __init__(
        self, clock: Clock, *, epoch: int = 1, parent: SampleLog | None = None,
        keep_requests: bool = True,
    ) -> None:
        self.clock = clock
        self.epoch = epoch
        self.parent = parent
        root = parent.header.thread_id if parent is not None else uuid7(clock.now_ms())
        self.header: Header = make_header(root, uuid7(clock.now_ms()), clock.now_ms())
        self.fork_at_seq = parent.last_seq if parent is not None else None
        self.events: list[Event] = []
        # sha256 -> bytes: the Render v1 bytes of each request, and any artifact a test's own
        # events reference (put here before the turn that renders them)
        self.artifacts: dict[str, bytes] = {}
        self.keep_requests = keep_requests
        self._render_cache = RenderCache()  # each turn renders only the events it added

    # ---- writing -------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        if self.events:
            return self.events[-1].seq
        return self.fork_at_seq or 0

    @property
    def last_hash(self) -> str:
        return self.events[-1].hash if self.events else self.header.hash

    def add(self, type_: EventType, data: JsonObject, actor: Actor = HOST) -> Event:
        return self.append(Draft(type_, data, actor))

    def append(self, draft: Draft) -> Event:
        """Append a typed draft (``threads.log.vocabulary.draft``)."""
        type_, data, actor = draft
        event = encode_event(
            seq=self.last_seq + 1,
            event_id=uuid7(self.clock.now_ms()),
            thread_id=self.header.thread_id,
            branch_id=self.header.branch_id,
            epoch=self.epoch,
            type=type_,
            time=self.clock.now_ms(),
            actor=actor,
            prev_hash=self.last_hash,
            data=data,
        )
        self.events.append(event)
        return event

    def started(self) -> Event:
        return self.add("thread_started", {**_CONFIG, "config_hash": value_hash(_CONFIG)})

    def turn(self, text: str = "What is in README.md?", reply: str = "One heading.") -> list[Event]:
        """A whole turn: user_input, model_request, model_response (end_turn), turn_completed."""
        first = self.add("user_input", {"source": "api", "text": text}, USER)
        # a root's own list as it grows: the render cache then feeds only the lines it added
        events = self.events if self.parent is None else [
            e for _, segment in self.segments() for e in segment
        ]
        started = next(e.data for e in events if e.type == "thread_started")
        # Render v1 (replay matches); ``artifacts`` holds what an added event references
        rendered = render(started, events, self.artifacts, cache=self._render_cache)
        if self.keep_requests:
            self.artifacts[rendered.request_ref()["sha256"]] = rendered.data
        request = self.append(draft(
            "model_request",
            {
                "attempt": 1,
                "declared_prefix": rendered.declared_prefix(),
                "request_ref": rendered.request_ref(),
            },
            {"kind": "host"},
        ))
        response = self.add(
            "model_response",
            {
                "completeness": "complete",
                "content": [{"text": reply, "type": "text"}],
                "request_event_id": request.event_id,
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 120, "output_tokens": 18},
            },
            MODEL,
        )
        done = self.add("turn_completed", {"reason": "end_turn"})
        return [first, request, response, done]

    def request_checkpoint(self, request: Event) -> RequestCheckpoint | None:
        """What turn request ``request`` (the last this log rendered) rendered, as a run keeps
        it for its fold row (``threads.log.render_resume``)."""
        return checkpoint_of(self._render_cache, request)

    def snapshot(self, snapshot_id: str = "snap_01") -> Event:
        """A quiescent snapshot (a fork point) that never expires."""
        return self.add(
            "snapshot",
            {
                "capture_class": "filesystem",
                "expires_at": None,
                "manifest_hash": value_hash({"files": []}),
                "provider": "fake",
                "quiesced": {"excluded": [], "frozen": [], "stopped": []},
                "sandbox_id": "sbx_parent_01",
                "snapshot_id": snapshot_id,
            },
        )

    def fork(self) -> SampleLog:
        """A child branch forked at this branch's last line (which should be a snapshot), with
        its header and its ``fork`` event."""
        child = self.branch()
        child.fork_event()
        return child

    def branch(self) -> SampleLog:
        """A child branch at this branch's last line: header only, ``fork_event`` still due."""
        return SampleLog(
            self.clock, epoch=self.epoch, parent=self, keep_requests=self.keep_requests
        )

    def fork_event(self) -> Event:
        """A child's first event: ``fork`` at ``at_seq + 1`` linking to the parent's line."""
        parent = self.parent
        if parent is None or self.events:
            raise ValueError("fork_event is only the first event of a child branch")
        at = [e for e in parent.events if e.seq == self.fork_at_seq]
        return self.add(
            "fork",
            {
                "at_hash": at[0].hash if at else parent.header.hash,
                "knowledge_policy": "pinned",
                "parent_branch_id": parent.header.branch_id,
                "reason": "snapshot",
                "sandbox_id": "sbx_child_01",
            },
        )

    # ---- reading -------------------------------------------------------------------------

    def segments(self) -> Iterator[tuple[Header, list[Event]]]:
        """Ancestors first, each through its child's fork point, then this branch."""
        if self.parent is not None:
            for header, events in self.parent.segments():
                yield header, [e for e in events if e.seq <= (self.fork_at_seq or 0)]
        yield self.header, self.events

    def lines(self) -> list[bytes]:
        return [
            line for header, events in self.segments()
            for line in (header.line, *(e.line for e in events))
        ]

    def head(self) -> Head:
        return Head(self.header.branch_id, self.last_seq, self.last_hash)

    def export(self) -> bytes:
        return b"".join(line + b"\n" for line in self.lines()) + self.head().line() + b"\n"
