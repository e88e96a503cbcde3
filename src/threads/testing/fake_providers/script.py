"""What a test scripts a fake provider to answer, in provider-neutral terms.

Each fake renders these into its own wire format (JSON or SSE); the script never contains wire
JSON, so one test can drive the OpenAI and Anthropic fakes alike. Invariant: a ``ScriptedTurn``
describes one complete model reply; cutting it short is an explicit ``cut_after_events``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

WireStop = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"]


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    """A tool call whose JSON arguments are streamed as ``fragments`` (joined, they must parse)."""

    call_id: str
    name: str
    fragments: list[str]

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)


@dataclass(frozen=True, slots=True)
class ScriptedUsage:
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    """One reply: text (streamed as the given chunks), then tool calls, then the stop.
    ``usage=None`` omits usage from the wire; ``cut_after_events`` drops the connection after that
    many SSE events, ``hold_after_events`` keeps it open and silent after that many until the
    server closes, a reply still in flight (streaming requests only)."""

    text_chunks: list[str] = field(default_factory=list)
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    usage: ScriptedUsage | None = None
    stop: WireStop | None = None  # None: end_turn, or tool_use when there are tool calls
    response_id: str = "resp_fake_1"
    cut_after_events: int | None = None
    hold_after_events: int | None = None

    @property
    def stop_reason(self) -> WireStop:
        if self.stop is not None:
            return self.stop
        return "tool_use" if self.tool_calls else "end_turn"


@dataclass(frozen=True, slots=True)
class ScriptedError:
    """An HTTP error with the provider's error body. ``code`` is OpenAI's ``error.code``;
    ``error_type`` overrides the error type the fake derives from the status. ``in_stream``
    sends it to a streaming request as an ``error`` SSE event inside a 200 reply instead."""

    status: int
    message: str
    code: str | None = None
    error_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    in_stream: bool = False


@dataclass(frozen=True, slots=True)
class ScriptedMalformed:
    """A 200 whose payload is broken: the whole body for a plain request, or one SSE event's
    data (sent after the stream's first event) for a streaming one."""

    data: str = "{this is not json"


@dataclass(frozen=True, slots=True)
class ScriptedStall:
    """Accept the request and never answer."""


Scripted = ScriptedTurn | ScriptedError | ScriptedMalformed | ScriptedStall
