"""The OpenAI Responses API dialect: Render v1 → ``input`` items, ``response.*`` events → output.

Invariant: output parts come from ``response.output_item.done`` items in output order (text
deltas are only for display), and a stream counts as complete only once ``response.completed``
or ``response.incomplete`` arrived.
"""

from __future__ import annotations

import json
from typing import Any

from threads.adapters.base import DialectBase
from threads.adapters.errors import MalformedResponseError
from threads.adapters.wire import (
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
from threads.models.protocol import ModelCallError, ModelOutput, ModelRequest, StopReason, Usage

_INCOMPLETE_STOP: dict[str, StopReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "refusal",
}


class ResponsesDialect(DialectBase):
    reserved_params = frozenset(
        {"model", "input", "instructions", "tools", "stream", "max_output_tokens"}
    )

    def render(self, request: ModelRequest, *, streaming: bool) -> JsonObject:
        cap, params = self.output_cap(request.params)
        body: JsonObject = {
            "model": self._model,
            "instructions": request.system,
            "input": [item for message in request.messages for item in _input_items(message)],
            "max_output_tokens": cap,
            "stream": streaming,
        }
        if request.tools:
            body["tools"] = [
                {"type": "function", "name": t.name, "description": t.description,
                 "parameters": t.input_schema, "strict": False}
                for t in request.tools
            ]
        body.update(params)
        return body

    async def send(self, client: Any, body: JsonObject) -> Any:
        rest = {k: v for k, v in body.items() if k not in ("model", "stream")}
        return await client.responses.create(
            model=body["model"], stream=body["stream"], extra_body=rest
        )

    def reader(self) -> ResponsesStreamReader:
        return ResponsesStreamReader()

    def read_complete(self, response: JsonObject) -> ModelOutput:
        return _output(response)


class ResponsesStreamReader:
    def __init__(self) -> None:
        self._items: dict[int, JsonValue] = {}
        self._final: JsonObject | None = None

    def feed(self, event: JsonObject) -> str | None:
        kind = event.get("type")
        if kind == "response.output_text.delta":
            return need(event, "delta", str)
        if kind == "response.output_item.done":
            self._items[need(event, "output_index", int)] = need_object(event, "item")
        elif kind in ("response.completed", "response.incomplete"):
            self._final = need_object(event, "response")
        elif kind in ("response.failed", "error"):
            raise _failed(event)
        return None

    def finish(self) -> ModelOutput:
        if self._final is None:
            raise MalformedResponseError("the stream ended before response.completed")
        items = [self._items[i] for i in sorted(self._items)]
        return _output({**self._final, "output": items})


def _input_items(message: Message) -> list[JsonValue]:
    role = message["role"]
    if message["role"] == "tool":
        return [{"type": "function_call_output", "call_id": message["call_id"],
                 "output": text_of(message["content"])}]
    text_type = "output_text" if role == "assistant" else "input_text"
    items: list[JsonValue] = []
    if text := text_of(message["content"]):
        items.append({"type": "message", "role": role,
                      "content": [{"type": text_type, "text": text}]})
    items += [
        {"type": "function_call", "call_id": part["call_id"], "name": part["name"],
         "arguments": json.dumps(part["input"], separators=(",", ":"))}
        for part in message["content"] if part["type"] == "tool_use"
    ]
    return items


def _output(response: JsonObject) -> ModelOutput:
    status = need(response, "status", str)
    if status == "failed":
        raise _failed({"response": response})
    content: list[OutputPart] = []
    for item in need_objects(response, "output"):
        kind = item.get("type")
        if kind == "message":
            text = "".join(
                need(part, "text", str) for part in need_objects(item, "content")
                if part.get("type") == "output_text"
            )
            if text:
                content.append(text_part(text))
        elif kind == "function_call":
            content.append(tool_use(need(item, "call_id", str), need(item, "name", str),
                                    need(item, "arguments", str)))
    return ModelOutput(
        content=content,
        stop_reason=_stop_reason(status, response, content),
        usage=_usage(sub(response, "usage")),
        provider_request_id=need(response, "id", str),
    )


def _stop_reason(
    status: str, response: JsonObject, content: list[OutputPart]
) -> StopReason:
    if status == "incomplete":
        reason = (sub(response, "incomplete_details") or {}).get("reason")
        return _INCOMPLETE_STOP.get(str(reason), "other")
    if any(part["type"] == "tool_use" for part in content):
        return "tool_use"
    return "end_turn" if status == "completed" else "other"


def _usage(usage: JsonObject | None) -> Usage:
    if usage is None:
        return no_usage()
    return Usage(
        input_tokens=maybe(usage, "input_tokens"),
        output_tokens=maybe(usage, "output_tokens"),
        cache_read_tokens=maybe(sub(usage, "input_tokens_details"), "cached_tokens"),
        reasoning_tokens=maybe(sub(usage, "output_tokens_details"), "reasoning_tokens"),
    )


def _failed(event: JsonObject) -> ModelCallError:
    response = event.get("response")
    error = (sub(response, "error") if isinstance(response, dict) else None) or event
    return ModelCallError(
        f"OpenAI reported the response failed ({error.get('code')}): {error.get('message')}",
        reason="provider_error", provider_outcome="failed",
    )
