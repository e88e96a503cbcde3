"""The scriptable fake provider shared by the OpenAI and Anthropic fakes.

It owns the reply queue and the loopback server; a subclass only renders scripted items into its
wire format. Invariant: each request consumes exactly one scripted item, in order; a request with
nothing scripted gets a 500 naming the problem (a test that under-scripts fails loudly).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Self

from threads.testing.fake_providers.script import (
    Scripted,
    ScriptedError,
    ScriptedMalformed,
    ScriptedStall,
    ScriptedTurn,
)
from threads.testing.fake_providers.server import (
    BodyReply,
    LoopbackHTTPServer,
    RecordedRequest,
    Reply,
    SseEvent,
    SseReply,
    StallReply,
)


def json_reply(status: int, body: Any, headers: dict[str, str] | None = None) -> BodyReply:
    return BodyReply(status=status, body=json.dumps(body).encode(), headers=headers or {})


class FakeProvider:
    """Base of the fakes: ``async with Fake() as fake``, then ``fake.script(...)`` replies, point
    the SDK at ``fake.base_url`` and inspect ``fake.requests`` / ``fake.connections``."""

    base_path = ""

    def __init__(self) -> None:
        self._queue: deque[Scripted] = deque()
        self._server = LoopbackHTTPServer(self._handle)

    async def __aenter__(self) -> Self:
        await self._server.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._server.__aexit__(*exc)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}{self.base_path}"

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._server.requests

    @property
    def connections(self) -> list[tuple[str, int]]:
        return self._server.connections

    def script(self, *items: Scripted) -> None:
        self._queue.extend(items)

    async def wait_held(self) -> None:
        """Return once a reply scripted with ``hold_after_events`` is held mid-stream."""
        await self._server.holding.wait()

    async def _handle(self, request: RecordedRequest) -> Reply:
        if not self._queue:
            return json_reply(500, {"error": {"message": "the fake has no scripted reply left"}})
        item = self._queue.popleft()
        if isinstance(item, ScriptedStall):
            return StallReply()
        streaming = bool(request.body) and bool(request.json().get("stream"))
        if isinstance(item, ScriptedError):
            if not (item.in_stream and streaming):
                return json_reply(item.status, self.error_body(item), item.headers)
            error = SseEvent(data=json.dumps(self.error_body(item)), event="error")
            return SseReply(events=[self._first_event(request), error])
        if isinstance(item, ScriptedMalformed):
            if not streaming:
                return BodyReply(status=200, body=item.data.encode())
            first = self._first_event(request)
            return SseReply(events=[first, SseEvent(data=item.data, event=first.event)])
        if not streaming:
            return json_reply(200, self.complete_body(request, item))
        return SseReply(events=self.stream_events(request, item), cut_after=item.cut_after_events,
                        hold_after=item.hold_after_events)

    def _first_event(self, request: RecordedRequest) -> SseEvent:
        """The opening event of a stream (e.g. ``message_start``), before a scripted failure."""
        return self.stream_events(request, ScriptedTurn())[0]

    def error_body(self, error: ScriptedError) -> Any:
        raise NotImplementedError

    def complete_body(self, request: RecordedRequest, turn: ScriptedTurn) -> Any:
        raise NotImplementedError

    def stream_events(self, request: RecordedRequest, turn: ScriptedTurn) -> list[SseEvent]:
        raise NotImplementedError
