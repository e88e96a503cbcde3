"""The Anthropic Messages dialect: Render v1 → ``messages`` with ``tool_use`` / ``tool_result``
blocks; ``message_*`` / ``content_block_*`` events → output.

Invariants: consecutive Render v1 lines that map to the same wire role are merged into one
message (Anthropic wants all results of parallel tool calls in the next user message); a stream
is complete only once ``message_stop`` arrived; block kinds Render v1 cannot carry (thinking,
server tools) are left out of the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from threads.adapters.base import DialectBase
from threads.adapters.errors import MalformedResponseError
from threads.adapters.wire import (
    ToolCallAssembler,
    maybe,
    need,
    need_object,
    need_objects,
    no_usage,
    sub,
    text_part,
)
from threads.log.json_types import JsonObject, JsonValue
from threads.log.render_lines import Message
from threads.log.vocabulary import OutputPart
from threads.models.protocol import ModelOutput, ModelRequest, StopReason, Usage

_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence", "refusal": "refusal", "pause_turn": "pause_turn",
    "model_context_window_exceeded": "context_window_exceeded",
}


class MessagesDialect(DialectBase):
    reserved_params = frozenset({"model", "messages", "system", "tools", "stream"})

    def render(self, request: ModelRequest, *, streaming: bool) -> JsonObject:
        cap, params = self.output_cap(request.params)
        body: JsonObject = {
            "model": self._model,
            "max_tokens": cap,
            "messages": _messages(request.messages),
            "stream": streaming,
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        body.update(params)
        return body

    async def send(self, client: Any, body: JsonObject) -> Any:
        named = ("model", "max_tokens", "messages", "stream")
        rest = {k: v for k, v in body.items() if k not in named}
        return await client.messages.create(**{k: body[k] for k in named}, extra_body=rest)

    def reader(self) -> MessagesStreamReader:
        return MessagesStreamReader()

    def read_complete(self, response: JsonObject) -> ModelOutput:
        content: list[OutputPart] = []
        for block in need_objects(response, "content"):
            if block.get("type") == "text":
                content.append(text_part(need(block, "text", str)))
            elif block.get("type") == "tool_use":
                content.append({"type": "tool_use", "call_id": need(block, "id", str),
                                "name": need(block, "name", str),
                                "input": need_object(block, "input")})
        return ModelOutput(
            content=content,
            stop_reason=_STOP.get(str(response.get("stop_reason")), "other"),
            usage=_usage(sub(response, "usage")),
            provider_request_id=need(response, "id", str),
        )


class MessagesStreamReader:
    def __init__(self) -> None:
        self._texts: dict[int, list[str]] = {}
        self._calls = ToolCallAssembler()
        self._usage: JsonObject = {}
        self._id: str | None = None
        self._stop: StopReason = "other"
        self._stopped = False

    def feed(self, event: JsonObject) -> str | None:
        kind = event.get("type")
        if kind == "message_start":
            message = need_object(event, "message")
            self._id = need(message, "id", str)
            self._usage.update(sub(message, "usage") or {})
        elif kind == "content_block_start":
            index, block = need(event, "index", int), need_object(event, "content_block")
            if block.get("type") == "text":
                self._texts[index] = [str(block.get("text") or "")]
            elif block.get("type") == "tool_use":
                self._calls.start(index, need(block, "id", str), need(block, "name", str))
        elif kind == "content_block_delta":
            return self._delta(need(event, "index", int), need_object(event, "delta"))
        elif kind == "message_delta":
            delta = need_object(event, "delta")
            self._stop = _STOP.get(str(delta.get("stop_reason")), "other")
            # message_delta usage is cumulative; it may restate input counts, never erase them
            self._usage.update({k: v for k, v in (sub(event, "usage") or {}).items()
                                if v is not None})
        elif kind == "message_stop":
            self._stopped = True
        return None

    def _delta(self, index: int, delta: JsonObject) -> str | None:
        if delta.get("type") == "text_delta" and index in self._texts:
            text = need(delta, "text", str)
            self._texts[index].append(text)
            return text
        if delta.get("type") == "input_json_delta":
            self._calls.add(index, need(delta, "partial_json", str))
        return None

    def finish(self) -> ModelOutput:
        if not self._stopped:
            raise MalformedResponseError("the stream ended before message_stop")
        blocks: dict[int, OutputPart] = {
            index: text_part("".join(parts)) for index, parts in self._texts.items()
        }
        blocks.update(self._calls.parts())
        return ModelOutput(
            content=[blocks[i] for i in sorted(blocks)],
            stop_reason=self._stop,
            usage=_usage(self._usage) if self._usage else no_usage(),
            provider_request_id=self._id,
        )


def _messages(lines: Sequence[Message]) -> list[JsonValue]:
    merged: list[tuple[str, list[JsonValue]]] = []
    for line in lines:
        role = "assistant" if line["role"] == "assistant" else "user"
        blocks = _blocks(line)
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, blocks))
    return [{"role": role, "content": blocks} for role, blocks in merged]


def _blocks(line: Message) -> list[JsonValue]:
    if line["role"] == "tool":
        return [{
            "type": "tool_result", "tool_use_id": line["call_id"],
            "content": [{"type": "text", "text": p["text"]} for p in line["content"]
                        if p["type"] == "text" and p["text"]],
            "is_error": bool(line.get("is_error", False)),
        }]
    blocks: list[JsonValue] = []
    for part in line["content"]:
        if part["type"] == "text" and part["text"]:  # the API rejects empty text blocks
            blocks.append({"type": "text", "text": part["text"]})
        elif part["type"] == "tool_use":
            blocks.append({"type": "tool_use", "id": part["call_id"], "name": part["name"],
                           "input": part["input"]})
    return blocks


def _usage(usage: JsonObject | None) -> Usage:
    if usage is None:
        return no_usage()
    return Usage(
        input_tokens=maybe(usage, "input_tokens"),
        output_tokens=maybe(usage, "output_tokens"),
        cache_read_tokens=maybe(usage, "cache_read_input_tokens"),
        cache_write_tokens=maybe(usage, "cache_creation_input_tokens"),
    )
