"""A fake OpenAI server: the Responses API and Chat Completions, JSON and SSE.

It speaks the wire formats the official SDK parses (``response.*`` events; ``chat.completion.chunk``
with ``delta.tool_calls[index]`` fragments and a usage chunk when
``stream_options.include_usage``). Invariant: a streamed reply and a plain reply of the same
``ScriptedTurn`` describe the same output.
"""

from __future__ import annotations

import json
from typing import Any

from threads.log.json_types import JsonObject
from threads.testing.fake_providers.provider import FakeProvider
from threads.testing.fake_providers.script import ScriptedError, ScriptedTurn, ScriptedUsage
from threads.testing.fake_providers.server import RecordedRequest, SseEvent

_CREATED = 1_700_000_000
_CHAT_FINISH = {
    "end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length",
    "refusal": "content_filter", "stop_sequence": "stop", "pause_turn": "stop",
}
_INCOMPLETE_REASON = {"max_tokens": "max_output_tokens", "refusal": "content_filter"}
_ERROR_TYPE = {
    400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error",
    404: "invalid_request_error", 429: "rate_limit_error",
}


class OpenAIFake(FakeProvider):
    base_path = "/v1"

    def error_body(self, error: ScriptedError) -> Any:
        return {"error": {
            "message": error.message,
            "type": error.error_type or _ERROR_TYPE.get(error.status, "server_error"),
            "param": None,
            "code": error.code,
        }}

    def complete_body(self, request: RecordedRequest, turn: ScriptedTurn) -> Any:
        model = request.json().get("model")
        if request.path.endswith("/responses"):
            return _response_object(turn, model, _response_items(turn), final=True)
        message: JsonObject = {
            "role": "assistant",
            "content": "".join(turn.text_chunks) or None,
            "refusal": None,
        }
        if turn.tool_calls:
            message["tool_calls"] = [
                {"id": c.call_id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls
            ]
        body: JsonObject = {
            "id": turn.response_id, "object": "chat.completion", "created": _CREATED,
            "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": _CHAT_FINISH[turn.stop_reason]}],
        }
        if turn.usage is not None:
            body["usage"] = _chat_usage(turn.usage)
        return body

    def stream_events(self, request: RecordedRequest, turn: ScriptedTurn) -> list[SseEvent]:
        if request.path.endswith("/responses"):
            return _responses_events(turn, request.json().get("model"))
        return _chat_chunks(turn, request.json())


def _response_items(turn: ScriptedTurn) -> list[JsonObject]:
    items: list[JsonObject] = []
    if turn.text_chunks:
        items.append({
            "type": "message", "id": "msg_fake_0", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "".join(turn.text_chunks),
                         "annotations": []}],
        })
    items += [
        {"type": "function_call", "id": f"fc_fake_{i}", "call_id": c.call_id, "name": c.name,
         "arguments": c.arguments, "status": "completed"}
        for i, c in enumerate(turn.tool_calls)
    ]
    return items


def _response_object(
    turn: ScriptedTurn, model: str, output: list[JsonObject], *, final: bool
) -> JsonObject:
    incomplete = _INCOMPLETE_REASON.get(turn.stop_reason)
    body: JsonObject = {
        "id": turn.response_id, "object": "response", "created_at": _CREATED, "model": model,
        "status": ("incomplete" if incomplete else "completed") if final else "in_progress",
        "incomplete_details": {"reason": incomplete} if final and incomplete else None,
        "output": [*output], "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": None,
    }
    if final and turn.usage is not None:
        u = turn.usage
        body["usage"] = {
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cache_read_tokens or 0},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens or 0},
            "total_tokens": u.input_tokens + u.output_tokens,
        }
    return body


def _responses_events(turn: ScriptedTurn, model: str) -> list[SseEvent]:
    events: list[JsonObject] = [{
        "type": "response.created", "response": _response_object(turn, model, [], final=False),
    }]
    items = _response_items(turn)
    for index, item in enumerate(items):
        started = {**item, "status": "in_progress"}
        if item["type"] == "message":
            started["content"] = []
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": started})
            events += [
                {"type": "response.output_text.delta", "item_id": item["id"],
                 "output_index": index, "content_index": 0, "delta": chunk, "logprobs": []}
                for chunk in turn.text_chunks
            ]
        else:
            started["arguments"] = ""
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": started})
            call = turn.tool_calls[index - (1 if turn.text_chunks else 0)]
            events += [
                {"type": "response.function_call_arguments.delta", "item_id": item["id"],
                 "output_index": index, "delta": fragment}
                for fragment in call.fragments
            ]
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed",
                   "response": _response_object(turn, model, items, final=True)})
    return [
        SseEvent(event=str(e["type"]), data=json.dumps({**e, "sequence_number": n}))
        for n, e in enumerate(events)
    ]


def _chat_usage(usage: ScriptedUsage) -> JsonObject:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens or 0},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
    }


def _chat_chunks(turn: ScriptedTurn, body: JsonObject) -> list[SseEvent]:
    def chunk(delta: JsonObject, finish: str | None = None) -> JsonObject:
        return {"id": turn.response_id, "object": "chat.completion.chunk", "created": _CREATED,
                "model": body.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": text}) for text in turn.text_chunks]
    chunks += [
        chunk({"tool_calls": [{"index": i, "id": c.call_id, "type": "function",
                               "function": {"name": c.name, "arguments": ""}}]})
        for i, c in enumerate(turn.tool_calls)
    ]
    # Fragments of parallel calls interleave round-robin, as only ``index`` ties them together.
    longest = max((len(c.fragments) for c in turn.tool_calls), default=0)
    chunks += [
        chunk({"tool_calls": [{"index": i, "function": {"arguments": c.fragments[n]}}]})
        for n in range(longest)
        for i, c in enumerate(turn.tool_calls)
        if n < len(c.fragments)
    ]
    chunks.append(chunk({}, _CHAT_FINISH[turn.stop_reason]))
    options = body.get("stream_options")
    if turn.usage is not None and isinstance(options, dict) and options.get("include_usage"):
        chunks.append({**chunk({}), "choices": [], "usage": _chat_usage(turn.usage)})
    return [SseEvent(data=json.dumps(c)) for c in chunks] + [SseEvent(data="[DONE]")]
