"""A thread with compactions, written by hand for reader, renderer and replay tests.

Every request is the Render v1 of the log before it (a summarizer's request included), and
every artifact an event references is kept in ``artifacts``, so the log verifies, reads and
replays until a test breaks one rule on purpose.
"""

from __future__ import annotations

from typing import Any

import pytest

from hand_config import started_data
from threads.clock import FakeClock
from threads.errors import LogError
from threads.log.fold import Fold
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.log.render import Rendered, render, render_summary_request
from threads.log.render_context import summary_guides
from threads.log.verify import verify_export
from threads.testing.sample_log import HOST, MODEL, USER, SampleLog

TOOL = {
    "description": "Read a file.",
    "effect_class": "read_only",
    "input_schema": {"additionalProperties": True, "properties": {}, "type": "object"},
    "name": "read",
}


class CompactionLog:
    def __init__(self, **policy: Any) -> None:
        self.log = SampleLog(FakeClock(1790000000000))
        self.add("thread_started", started_data(TOOL, **policy))

    @property
    def events(self) -> list[Event]:
        return self.log.events

    @property
    def artifacts(self) -> dict[str, bytes]:
        return self.log.artifacts

    def add(self, type_: str, data: dict[str, Any], actor: dict[str, Any] = HOST) -> Event:
        return self.log.add(type_, data, actor)

    # ---- the conversation ------------------------------------------------------------------

    def user(self, text: str = "hi") -> Event:
        return self.add("user_input", {"source": "api", "text": text}, USER)

    def _send(self, rendered: Rendered, attempt: int, extra: dict[str, Any]) -> Event:
        self.artifacts[rendered.sha256] = rendered.data
        return self.add("model_request", {
            "attempt": attempt, "declared_prefix": rendered.declared_prefix(),
            "request_ref": rendered.request_ref(), **extra,
        })

    def request(self, attempt: int = 1) -> Event:
        return self._send(render(self.events[0].data, self.events, self.artifacts), attempt, {})

    def respond(self, request: Event, *parts: dict[str, Any], text: str = "ok") -> Event:
        content = list(parts) or [{"type": "text", "text": text}]
        tools = any(p["type"] == "tool_use" for p in content)
        return self.add("model_response", {
            "completeness": "complete", "content": content,
            "request_event_id": request.event_id,
            "stop_reason": "tool_use" if tools else "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }, MODEL)

    def done(self) -> Event:
        return self.add("turn_completed", {"reason": "end_turn"})

    def turn(self, text: str = "hi", reply: str = "ok") -> list[Event]:
        first = self.user(text)
        request = self.request()
        return [first, request, self.respond(request, text=reply), self.done()]

    def tool_turn(self, call_id: str, preview: str, text: str = "read it") -> list[Event]:
        """A turn that reads a file: the call, its result, the final answer."""
        first = self.user(text)
        request = self.request()
        part = {"type": "tool_use", "call_id": call_id, "name": "read", "input": {"p": call_id}}
        self.respond(request, part)
        self.add("tool_call", {
            "call_id": call_id, "name": "read", "input": {"p": call_id},
            "request_event_id": request.event_id,
        })
        self.add("permission_decision", {
            "call_id": call_id, "decision": "allow", "source": "policy", "rule_id": "r",
        })
        result = self.add("tool_result", {
            "call_id": call_id, "completeness": "complete", "is_error": False,
            "origin": "executed", "preview": preview,
        }, {"kind": "tool"})
        final = self.request()
        self.respond(final, text="read")
        return [first, result, self.done()]

    # ---- compaction ------------------------------------------------------------------------

    def requested(self, instructions: str | None = None) -> Event:
        data = {"instructions": instructions} if instructions else {}
        return self.add("compaction_requested", data, USER)

    def side_request(self, cause: Event | None = None, attempt: int = 1) -> Event:
        guides = summary_guides(self.events, cause)
        rendered = render_summary_request(
            self.events[0].data, self.events, self.artifacts, guides, cause
        )
        extra: dict[str, Any] = {"purpose": "compaction"}
        if cause is not None:
            extra["cause_event_id"] = cause.event_id
        return self._send(rendered, attempt, extra)

    def summary_ref(self, text: str) -> dict[str, Any]:
        raw = text.encode("utf-8")
        self.artifacts[sha256_hex(raw)] = raw
        return {"bytes": len(raw), "media_type": "text/plain", "sha256": sha256_hex(raw)}

    def compacted(
        self, first: Event, last: Event, request: Event, text: str, *,
        trigger: str = "threshold", cause: Event | None = None, **override: Any,
    ) -> Event:
        data: dict[str, Any] = {
            "from_event_id": first.event_id, "from_seq": first.seq,
            "to_event_id": last.event_id, "to_seq": last.seq,
            "summary_ref": self.summary_ref(text),
            "summary_request_event_id": request.event_id, "trigger": trigger,
        }
        if cause is not None:
            data["cause_event_id"] = cause.event_id
        return self.add("compacted", {**data, **override})

    def summarize(
        self, first: Event, last: Event, text: str = "We said hi.", cause: Event | None = None,
        trigger: str = "threshold",
    ) -> Event:
        """A side request, its reply and the compaction it makes."""
        request = self.side_request(cause)
        self.respond(request, text=text)
        return self.compacted(first, last, request, text, trigger=trigger, cause=cause)

    def failed(self, reason: str = "empty_summary", cause: Event | None = None,
               request: Event | None = None) -> Event:
        data: dict[str, Any] = {"reason": reason, "stage": "summary"}
        if cause is not None:
            data["cause_event_id"] = cause.event_id
        if request is not None:
            data["request_event_id"] = request.event_id
        return self.add("compaction_failed", data)

    # ---- reading ---------------------------------------------------------------------------

    def export(self) -> bytes:
        return self.log.export()

    def read(self) -> Fold:
        fold = Fold()
        verify_export(self.export(), apply=fold.apply, on_header=fold.header)
        return fold

    def refused_at_last(self, code: str = "invalid_transition") -> LogError:
        with pytest.raises(LogError) as refused:
            self.read()
        err = refused.value
        assert (err.code, err.seq) == (code, self.events[-1].seq), err.message
        return err
