"""``scripted_model``: a deterministic model that plays a script of replies.

Which reply a request gets is decided by how far the conversation is (the number of assistant
messages already in the request), so a run that crashes and is resumed in another process gets
the same replies an uncrashed run would. Errors scripted before a reply are raised once per model
instance before that reply. A request past the end of the script, or one that fails a reply's
``expect`` check, raises ``ScriptError``: a test bug is loud, never a silent default.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from threads.log.ids import random_bytes
from threads.log.json_types import JsonObject
from threads.log.render_lines import Message
from threads.log.vocabulary import AdapterRef, OutputPart
from threads.models.fence import Fence
from threads.models.protocol import (
    LookupResult,
    ModelCallError,
    ModelOutput,
    ModelRequest,
    Price,
    StopReason,
    TextDelta,
    Usage,
)

_ROLE = itemgetter("role")


class ScriptError(AssertionError):
    """The run asked the scripted model for something its script does not have."""


@dataclass(frozen=True, slots=True)
class ToolUse:
    name: str
    input: JsonObject
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    text: str | None = None
    tool_calls: tuple[ToolUse, ...] = ()
    usage: Usage = field(default_factory=lambda: Usage(input_tokens=10, output_tokens=5))
    stop_reason: StopReason | None = None
    expect: Callable[[ModelRequest], bool] | None = None
    chunks: int = 1  # how many text deltas the text is streamed in


@dataclass(frozen=True, slots=True)
class Fail:
    """A provider error raised before the next reply."""

    error: ModelCallError


ScriptItem = Reply | Fail


def say(
    text: str,
    *,
    usage: tuple[int | None, int | None] = (10, 5),
    chunks: int = 1,
    stop_reason: StopReason | None = None,
) -> Reply:
    """A text reply; ``stop_reason`` (default ``end_turn``) plays e.g. ``max_tokens`` or
    ``pause_turn``."""
    return Reply(text=text, usage=Usage(*usage), chunks=chunks, stop_reason=stop_reason)


def call(name: str, call_id: str | None = None, /, **arguments: Any) -> ToolUse:
    return ToolUse(name, dict(arguments), call_id)


def use(
    *calls: ToolUse, text: str | None = None, usage: tuple[int | None, int | None] = (10, 5)
) -> Reply:
    return Reply(text=text, tool_calls=tuple(calls), usage=Usage(*usage))


def rate_limited(retry_after_ms: int | None = 0) -> Fail:
    """A 429; ``retry_after_ms`` None: without a Retry-After (the run backs off)."""
    return Fail(
        ModelCallError(
            "scripted 429",
            reason="rate_limited",
            provider_outcome="failed",
            retryable=True,
            retry_after_ms=retry_after_ms,
            http_status=429,
        )
    )


def overloaded() -> Fail:
    """A 529: the provider is overloaded (retried with backoff; may lead to a fallback)."""
    return Fail(
        ModelCallError(
            "scripted 529 overloaded",
            reason="overloaded",
            provider_outcome="failed",
            retryable=True,
            http_status=529,
        )
    )


def server_error() -> Fail:
    return Fail(
        ModelCallError(
            "scripted 500 after sending",
            reason="server_error",
            provider_outcome="unknown",
            http_status=500,
        )
    )


class ScriptedModel:
    """A ``Model`` that plays ``script`` (replies and provider errors), answers ``lookup`` from
    ``lookup`` (keyed by model_request event id), and records every request it was sent."""

    provider = "scripted"

    def __init__(
        self,
        script: Sequence[ScriptItem],
        *,
        name: str = "scripted-1",
        context_window: int = 200_000,
        max_output_tokens: int = 1024,
        price: Price | None = None,
        lookup: dict[str, LookupResult] | None = None,
        input_modalities: Sequence[str] = ("text",),
    ) -> None:
        self.name = name
        self.input_modalities = frozenset(input_modalities)
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.price = price
        self._script = list(script)
        self._plans: list[tuple[list[Fail], Reply]] | None = None  # _plan's index, built once
        self._lookups = dict(lookup or {})
        self._errors_raised: dict[int, int] = {}
        self.requests: list[ModelRequest] = []
        # messages, the last one, replies
        self._counted: tuple[int, Message | None, int] = (0, None, 0)
        self.lookup_calls: list[str] = []
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"ScriptedModel({self.name!r}, {len(self._script)} items)"

    async def aclose(self) -> None:
        """Nothing to release."""

    def adapter_ref(self) -> AdapterRef:
        return {"name": "scripted", "settings": {}, "version": "1"}

    def params(self) -> JsonObject:
        return {"max_tokens": self.max_output_tokens}

    def _plan(self, position: int) -> tuple[list[Fail], Reply]:
        """The errors to raise before reply #``position`` (0-based), and that reply."""
        if self._plans is None:
            self._plans = []
            errors: list[Fail] = []
            for item in self._script:
                if isinstance(item, Fail):
                    errors.append(item)
                else:
                    self._plans.append((errors, item))
                    errors = []
        if position >= len(self._plans):
            raise ScriptError(
                f"scripted model has no reply #{position + 1}: the script holds"
                f" {len(self._plans)}"
            )
        return self._plans[position]

    def _replies_in(self, messages: Sequence[Message]) -> int:
        """How many assistant lines ``messages`` holds: the script's position. A run's next
        request extends its last one, so only the lines added since are counted."""
        seen, last, replies = self._counted
        if not (seen and len(messages) >= seen and messages[seen - 1] is last):
            seen, replies = 0, 0
        replies += list(map(_ROLE, messages[seen:])).count("assistant")
        self._counted = (len(messages), messages[-1] if messages else None, replies)
        return replies

    async def stream(
        self, request: ModelRequest, fence: Fence
    ) -> AsyncIterator[TextDelta | ModelOutput]:
        await fence.check()
        self.requests.append(request)
        position = self._replies_in(request.messages)
        errors, reply = self._plan(position)
        raised = self._errors_raised.get(position, 0)
        if raised < len(errors):
            self._errors_raised[position] = raised + 1
            raise errors[raised].error
        if reply.expect is not None and not reply.expect(request):
            raise ScriptError(f"request #{position + 1} does not match the script's expectation")
        content: list[OutputPart] = []
        if reply.text:
            size = max(1, -(-len(reply.text) // reply.chunks))
            for start in range(0, len(reply.text), size):
                yield TextDelta(reply.text[start : start + size])
            content.append({"type": "text", "text": reply.text})
        for tool_use in reply.tool_calls:
            call_id = tool_use.call_id or f"call_{random_bytes(6).hex()}"
            content.append(
                {
                    "type": "tool_use",
                    "call_id": call_id,
                    "name": tool_use.name,
                    "input": tool_use.input,
                }
            )
        stop: StopReason = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
        yield ModelOutput(content=content, stop_reason=stop, usage=reply.usage)

    async def lookup(self, request: ModelRequest, fence: Fence) -> LookupResult:
        await fence.check()
        event_id = request.request_key.rsplit(":", 1)[-1]
        self.lookup_calls.append(event_id)
        return self._lookups.get(event_id, LookupResult(status="unknown"))


# The public name: a deterministic model for tests and the demo (see the module docstring).
scripted_model = ScriptedModel
