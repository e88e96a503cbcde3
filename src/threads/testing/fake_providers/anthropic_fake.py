"""A fake Anthropic Messages API: JSON and SSE (``message_start``, ``content_block_*`` with
``text_delta`` / ``input_json_delta``, ``message_delta`` with stop reason and usage,
``message_stop``). Invariant: a streamed reply and a plain reply of the same ``ScriptedTurn``
describe the same message.
"""

from __future__ import annotations

import json
from typing import Any

from threads.log.json_types import JsonObject
from threads.testing.fake_providers.provider import FakeProvider
from threads.testing.fake_providers.script import ScriptedError, ScriptedTurn
from threads.testing.fake_providers.server import RecordedRequest, SseEvent

_ERROR_TYPE = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
    529: "overloaded_error",
}


class AnthropicFake(FakeProvider):
    def error_body(self, error: ScriptedError) -> Any:
        return {"type": "error", "error": {
            "type": error.error_type or _ERROR_TYPE.get(error.status, "api_error"),
            "message": error.message,
        }}

    def complete_body(self, request: RecordedRequest, turn: ScriptedTurn) -> Any:
        output_tokens = turn.usage.output_tokens if turn.usage is not None else 1
        message = _message(turn, request.json().get("model"), output_tokens)
        message["content"] = [*_blocks(turn)]
        message["stop_reason"] = turn.stop_reason
        return message

    def stream_events(self, request: RecordedRequest, turn: ScriptedTurn) -> list[SseEvent]:
        events: list[JsonObject] = [
            {"type": "message_start",
             "message": _message(turn, request.json().get("model"), output_tokens=1)},
        ]
        for index, block in enumerate(_blocks(turn)):
            if block["type"] == "text":
                events.append({"type": "content_block_start", "index": index,
                               "content_block": {"type": "text", "text": ""}})
                events += [{"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": chunk}}
                           for chunk in turn.text_chunks]
            else:
                events.append({"type": "content_block_start", "index": index,
                               "content_block": {**block, "input": {}}})
                call = turn.tool_calls[index - (1 if turn.text_chunks else 0)]
                events += [{"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": fragment}}
                           for fragment in call.fragments]
            events.append({"type": "content_block_stop", "index": index})
        delta: JsonObject = {"type": "message_delta",
                             "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None}}
        if turn.usage is not None:
            delta["usage"] = {"output_tokens": turn.usage.output_tokens}
        events += [delta, {"type": "message_stop"}]
        wire = [SseEvent(event=str(e["type"]), data=json.dumps(e)) for e in events]
        wire.insert(1, SseEvent(event="ping", data='{"type": "ping"}'))
        return wire


def _message(turn: ScriptedTurn, model: str, output_tokens: int) -> JsonObject:
    """The message object; its usage (if scripted) reports ``output_tokens`` so far."""
    message: JsonObject = {
        "id": turn.response_id, "type": "message", "role": "assistant", "content": [],
        "model": model, "stop_reason": None, "stop_sequence": None,
    }
    if turn.usage is not None:
        u = turn.usage
        message["usage"] = {
            "input_tokens": u.input_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": u.cache_read_tokens,
            "cache_creation_input_tokens": u.cache_write_tokens,
        }
    return message


def _blocks(turn: ScriptedTurn) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    if turn.text_chunks:
        blocks.append({"type": "text", "text": "".join(turn.text_chunks)})
    blocks += [{"type": "tool_use", "id": c.call_id, "name": c.name,
                "input": json.loads(c.arguments)} for c in turn.tool_calls]
    return blocks
