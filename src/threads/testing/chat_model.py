"""``chat_model``: a deterministic model for long conversations and compaction, for tests, drills
and benchmarks.

Each reply is a pure function of the request, so a run restarted in another process gets the same
answers with no script position to keep: a turn request is answered ``re: <last user text>``; a
summarizer's request (its last line asks for a summary) is answered ``summary of <n> lines``. With
``calls`` set, a turn request whose last line is the user's is answered first with one call of that
tool, ``{"query": <last user text>}`` (its call id a hash of the request), and the reply follows its
result. Usage reports a quarter token per byte of the messages as input, and a request over
``context_window`` such tokens fails ``prompt_too_long`` as a provider would; with ``prompt_cache``,
the lines a request shares from the start with the previous request are reported as
``cache_read_tokens`` (a provider's prompt cache). ``failures`` lists errors to raise, in order,
before the requests whose kind (``"turn"`` or ``"summary"``) they name. ``requests`` holds every
request sent, for assertions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Literal

from threads.log.json_types import JsonObject
from threads.log.render_context import SUMMARIZE
from threads.log.render_lines import Message, UserLine
from threads.log.vocabulary import AdapterRef, ToolUsePart
from threads.models.fence import Fence
from threads.models.protocol import (
    ModelCallError,
    ModelOutput,
    ModelRequest,
    Price,
    TextDelta,
    Usage,
)

Kind = Literal["turn", "summary"]


def prompt_too_long() -> ModelCallError:
    return ModelCallError(
        "the prompt is too long for the model's context window", reason="prompt_too_long",
        provider_outcome="failed", http_status=400, code="context_exhausted",
    )


class ChatModel:
    provider = "scripted"

    def __init__(
        self,
        *,
        name: str = "chat-1",
        context_window: int = 200_000,
        max_output_tokens: int = 256,
        failures: Sequence[tuple[Kind, ModelCallError]] = (),
        calls: str | None = None,
        prompt_cache: bool = False,
    ) -> None:
        self.name = name
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.price: Price | None = None
        self.failures = list(failures)
        self.calls = calls
        self.prompt_cache = prompt_cache
        self._cached: list[str] = []  # the previous request's lines, as a provider caches them
        self.requests: list[ModelRequest] = []

    async def aclose(self) -> None:
        """Nothing to release."""

    def adapter_ref(self) -> AdapterRef:
        return {"name": "scripted", "settings": {}, "version": "1"}

    def params(self) -> JsonObject:
        return {"max_tokens": self.max_output_tokens}

    def kinds(self) -> list[Kind]:
        return [kind_of(r) for r in self.requests]

    async def stream(
        self, request: ModelRequest, fence: Fence
    ) -> AsyncIterator[TextDelta | ModelOutput]:
        await fence.check()
        self.requests.append(request)
        kind = kind_of(request)
        if self.failures and self.failures[0][0] == kind:
            raise self.failures.pop(0)[1]
        lines = [json.dumps(m, separators=(",", ":")) for m in request.messages]
        size = sum(len(line) for line in lines)
        cached = self._cache_read(request.system, lines)
        digest = hashlib.sha256(json.dumps(list(request.messages)).encode()).hexdigest()
        tokens = (size + len(request.system)) // 4
        if tokens > self.context_window:
            raise prompt_too_long()
        last = request.messages[-1] if request.messages else None
        if kind == "turn" and self.calls is not None and last is not None and (
            last["role"] == "user"
        ):
            call: ToolUsePart = {
                "type": "tool_use", "call_id": "c" + digest[:16], "name": self.calls,
                "input": {"query": _last_user_text(request.messages)},
            }
            yield ModelOutput(content=[call], stop_reason="tool_use",
                              usage=self._usage(tokens, cached, 8))
            return
        if kind == "summary":
            text = f"summary of {len(request.messages) - 1} lines"
        else:
            text = f"re: {_last_user_text(request.messages)}"
        yield TextDelta(text)
        yield ModelOutput(
            content=[{"type": "text", "text": text}], stop_reason="end_turn",
            usage=self._usage(tokens, cached, len(text) // 4 + 1),
        )

    def _cache_read(self, system: str, lines: list[str]) -> int:
        """Tokens of the lines this request shares, from the start, with the previous one
        (a provider's prompt cache, which never expires here); 0 without ``prompt_cache``."""
        if not self.prompt_cache:
            return 0
        shared = 0
        previous, self._cached = self._cached, [system, *lines]
        for old, new in zip(previous, self._cached, strict=False):
            if old != new:
                break
            shared += len(new)
        return shared // 4

    def _usage(self, tokens: int, cached: int, output: int) -> Usage:
        if not self.prompt_cache:
            return Usage(input_tokens=tokens, output_tokens=output)
        return Usage(input_tokens=tokens - cached, output_tokens=output,
                     cache_read_tokens=cached, cache_write_tokens=0)


def kind_of(request: ModelRequest) -> Kind:
    last = request.messages[-1] if request.messages else None
    if last is None or last["role"] != "user":
        return "turn"
    return "summary" if _first_text(last).startswith(SUMMARIZE) else "turn"


def _last_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message["role"] == "user":
            return _first_text(message)
    return ""


def _first_text(message: UserLine) -> str:
    """The text of a user line's first part ("" if it has none or the part is not text)."""
    parts = message["content"]
    return parts[0]["text"] if parts and parts[0]["type"] == "text" else ""


chat_model = ChatModel
