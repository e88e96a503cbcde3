"""The OpenAI Chat Completions dialect (also what OpenAI-compatible local servers speak).

Render v1 → ``messages`` (system first, tool results as ``role: tool``); ``chat.completion.chunk``
deltas → output, with ``delta.tool_calls[index]`` fragments joined per index. Invariant: a stream
is complete only once a ``finish_reason`` arrived; usage comes from the trailing usage chunk
(``stream_options.include_usage``) and stays unknown if the server never sends it.
"""

from __future__ import annotations

import json
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
    text_of,
    text_part,
    tool_use,
)
from threads.log.json_types import JsonObject, JsonValue
from threads.log.render_lines import Message
from threads.log.vocabulary import OutputPart
from threads.models.protocol import ModelOutput, ModelRequest, StopReason, Usage

_FINISH: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class ChatDialect(DialectBase):
    reserved_params = frozenset(
        {"model", "messages", "tools", "stream", "stream_options", "max_completion_tokens"}
    )

    def render(self, request: ModelRequest, *, streaming: bool) -> JsonObject:
        cap, params = self.output_cap(request.params)
        messages: list[JsonValue] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages += [_message(m) for m in request.messages]
        body: JsonObject = {
            "model": self._model,
            "messages": messages,
            "max_completion_tokens": cap,
            "stream": streaming,
        }
        if streaming:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = [
                {"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                }}
                for t in request.tools
            ]
        body.update(params)
        return body

    async def send(self, client: Any, body: JsonObject) -> Any:
        rest = {k: v for k, v in body.items() if k not in ("model", "messages", "stream")}
        return await client.chat.completions.create(
            model=body["model"], messages=body["messages"], stream=body["stream"], extra_body=rest
        )

    def reader(self) -> ChatStreamReader:
        return ChatStreamReader()

    def read_complete(self, response: JsonObject) -> ModelOutput:
        choice = _first_choice(response)
        message = need_object(choice, "message")
        content: list[OutputPart] = []
        if text := message.get("content"):
            content.append(text_part(str(text)))
        for call in _objects(message, "tool_calls"):
            function = need_object(call, "function")
            content.append(tool_use(need(call, "id", str), need(function, "name", str),
                                    need(function, "arguments", str)))
        return ModelOutput(
            content=content,
            stop_reason=_with_calls(_stop_reason(choice), content),
            usage=_usage(sub(response, "usage")),
            provider_request_id=_response_id(response),
        )


class ChatStreamReader:
    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls = ToolCallAssembler()
        self._finish: StopReason | None = None
        self._usage: Usage = no_usage()
        self._id: str | None = None

    def feed(self, event: JsonObject) -> str | None:
        self._id = self._id or _response_id(event)
        if usage := sub(event, "usage"):
            self._usage = _usage(usage)
        choices = _objects(event, "choices")
        if not choices:
            return None
        choice = choices[0]
        delta = sub(choice, "delta") or {}
        for call in _objects(delta, "tool_calls"):
            index = need(call, "index", int)
            function = sub(call, "function") or {}
            if not self._calls.has(index):
                self._calls.start(index, need(call, "id", str), need(function, "name", str))
            if fragment := function.get("arguments"):
                self._calls.add(index, str(fragment))
        if choice.get("finish_reason"):
            self._finish = _stop_reason(choice)
        text = delta.get("content")
        if text:
            self._text.append(str(text))
            return str(text)
        return None

    def finish(self) -> ModelOutput:
        if self._finish is None:
            raise MalformedResponseError("the stream ended before a finish_reason")
        content: list[OutputPart] = []
        if text := "".join(self._text):
            content.append(text_part(text))
        calls = self._calls.parts()
        content += [calls[i] for i in sorted(calls)]
        return ModelOutput(content=content, stop_reason=_with_calls(self._finish, content),
                           usage=self._usage,
                           provider_request_id=self._id)


def _message(message: Message) -> JsonObject:
    role = message["role"]
    if message["role"] == "tool":
        return {"role": "tool", "tool_call_id": message["call_id"],
                "content": text_of(message["content"])}
    wire: JsonObject = {"role": role, "content": text_of(message["content"]) or None}
    calls: list[JsonValue] = [
        {"id": part["call_id"], "type": "function",
         "function": {"name": part["name"],
                      "arguments": json.dumps(part["input"], separators=(",", ":"))}}
        for part in message["content"] if part["type"] == "tool_use"
    ]
    if calls:
        wire["tool_calls"] = calls
    return wire


def _response_id(data: JsonObject) -> str | None:
    """Some OpenAI-compatible servers send no id; the reply is still complete without one."""
    value = data.get("id")
    return value if isinstance(value, str) else None


def _first_choice(response: JsonObject) -> JsonObject:
    choices = response.get("choices")
    if not isinstance(choices, list):
        raise MalformedResponseError(f"expected 'choices' to be list, got {choices!r:.80}")
    if not choices or not isinstance(choices[0], dict):
        raise MalformedResponseError("the response has no choices")
    return choices[0]


def _objects(data: JsonObject, key: str) -> list[JsonObject]:
    """An optional list of objects (absent, null or empty: none); other entries are malformed."""
    if not data.get(key):
        return []
    return need_objects(data, key)


def _stop_reason(choice: JsonObject) -> StopReason:
    return _FINISH.get(str(choice.get("finish_reason")), "other")


def _with_calls(stop: StopReason, content: list[OutputPart]) -> StopReason:
    """Some compatible servers finish tool calls with ``stop``; the calls still await results."""
    if stop == "end_turn" and any(part["type"] == "tool_use" for part in content):
        return "tool_use"
    return stop


def _usage(usage: JsonObject | None) -> Usage:
    if usage is None:
        return no_usage()
    return Usage(
        input_tokens=maybe(usage, "prompt_tokens"),
        output_tokens=maybe(usage, "completion_tokens"),
        cache_read_tokens=maybe(sub(usage, "prompt_tokens_details"), "cached_tokens"),
        reasoning_tokens=maybe(sub(usage, "completion_tokens_details"), "reasoning_tokens"),
    )
