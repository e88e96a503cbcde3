"""The OpenAI Chat Completions dialect (also what OpenAI-compatible local servers speak).

Render v1 → ``messages`` (system first, tool results as ``role: tool``); ``chat.completion.chunk``
deltas → output, with ``delta.tool_calls[index]`` fragments joined per index. Invariant: a stream
is complete only once a ``finish_reason`` arrived; usage comes from the trailing usage chunk
(``stream_options.include_usage``) and stays unknown if the server never sends it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from threads.adapters.base import DialectBase
from threads.adapters.errors import MalformedResponseError
from threads.adapters.wire import (
    ToolCallAssembler,
    maybe,
    need,
    no_usage,
    sub,
    text_of,
    text_part,
    tool_use,
)
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

    def render(self, request: ModelRequest, *, streaming: bool) -> dict[str, Any]:
        cap, params = self.output_cap(request.params)
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages += [_message(m) for m in request.messages]
        body: dict[str, Any] = {
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

    async def send(self, client: Any, body: dict[str, Any]) -> Any:
        rest = {k: v for k, v in body.items() if k not in ("model", "messages", "stream")}
        return await client.chat.completions.create(
            model=body["model"], messages=body["messages"], stream=body["stream"], extra_body=rest
        )

    def reader(self) -> ChatStreamReader:
        return ChatStreamReader()

    def read_complete(self, response: dict[str, Any]) -> ModelOutput:
        choice = _first_choice(response)
        message = need(choice, "message", dict)
        content: list[OutputPart] = []
        if text := message.get("content"):
            content.append(text_part(str(text)))
        for call in message.get("tool_calls") or []:
            function = need(call, "function", dict)
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

    def feed(self, event: dict[str, Any]) -> str | None:
        self._id = self._id or _response_id(event)
        if usage := sub(event, "usage"):
            self._usage = _usage(usage)
        choices = event.get("choices") or []
        if not choices:
            return None
        choice = choices[0]
        delta = sub(choice, "delta") or {}
        for call in delta.get("tool_calls") or []:
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


def _message(message: dict[str, Any]) -> dict[str, Any]:
    role = message["role"]
    if role == "tool":
        return {"role": "tool", "tool_call_id": message["call_id"],
                "content": text_of(message["content"])}
    wire: dict[str, Any] = {"role": role, "content": text_of(message["content"]) or None}
    calls = [
        {"id": part["call_id"], "type": "function",
         "function": {"name": part["name"],
                      "arguments": json.dumps(part["input"], separators=(",", ":"))}}
        for part in message["content"] if part.get("type") == "tool_use"
    ]
    if calls:
        wire["tool_calls"] = calls
    return wire


def _response_id(data: Mapping[str, Any]) -> str | None:
    """Some OpenAI-compatible servers send no id; the reply is still complete without one."""
    value = data.get("id")
    return value if isinstance(value, str) else None


def _first_choice(response: dict[str, Any]) -> dict[str, Any]:
    choices = need(response, "choices", list)
    if not choices or not isinstance(choices[0], dict):
        raise MalformedResponseError("the response has no choices")
    return choices[0]


def _stop_reason(choice: Mapping[str, Any]) -> StopReason:
    return _FINISH.get(str(choice.get("finish_reason")), "other")


def _with_calls(stop: StopReason, content: list[OutputPart]) -> StopReason:
    """Some compatible servers finish tool calls with ``stop``; the calls still await results."""
    if stop == "end_turn" and any(part["type"] == "tool_use" for part in content):
        return "tool_use"
    return stop


def _usage(usage: Mapping[str, Any] | None) -> Usage:
    if usage is None:
        return no_usage()
    return Usage(
        input_tokens=maybe(usage, "prompt_tokens"),
        output_tokens=maybe(usage, "completion_tokens"),
        cache_read_tokens=maybe(sub(usage, "prompt_tokens_details"), "cached_tokens"),
        reasoning_tokens=maybe(sub(usage, "completion_tokens_details"), "reasoning_tokens"),
    )
