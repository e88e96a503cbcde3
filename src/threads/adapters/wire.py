"""Reading provider replies: typed field access and tool-call assembly shared by all adapters.

Invariant: a reply that lacks a required field or carries tool arguments that are not a JSON
object raises ``MalformedResponseError``; nothing is guessed or half-returned.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from threads.adapters.errors import MalformedResponseError
from threads.log.json_types import JsonObject
from threads.log.render_lines import Message
from threads.log.vocabulary import (
    InputPart,
    OutputPart,
    ResultPart,
    TextPart,
    ToolUsePart,
)
from threads.models.protocol import ModelRequest, Usage

T = TypeVar("T", str, int)


def need(mapping: JsonObject, key: str, kind: type[T]) -> T:
    """``mapping[key]``, which must be a ``kind`` (``str`` or ``int``)."""
    value = mapping.get(key)
    if not isinstance(value, kind):
        raise MalformedResponseError(f"expected {key!r} to be {kind.__name__}, got {value!r:.80}")
    return value


def need_object(mapping: JsonObject, key: str) -> JsonObject:
    """``mapping[key]``, which must be a JSON object."""
    value = mapping.get(key)
    if not isinstance(value, dict):
        raise MalformedResponseError(f"expected {key!r} to be dict, got {value!r:.80}")
    return value


def need_objects(mapping: JsonObject, key: str) -> list[JsonObject]:
    """``mapping[key]``, which must be a list of JSON objects."""
    value = mapping.get(key)
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise MalformedResponseError(
            f"expected {key!r} to be a list of objects, got {value!r:.80}"
        )
    return [item for item in value if isinstance(item, dict)]


def maybe(mapping: JsonObject | None, key: str) -> int | None:
    """An optional token count: absent or null stays ``None`` (unknown), never 0."""
    if mapping is None:
        return None
    value = mapping.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedResponseError(f"expected {key!r} to be an integer, got {value!r:.80}")
    return value


def sub(mapping: JsonObject | None, key: str) -> JsonObject | None:
    """An optional nested object."""
    if mapping is None:
        return None
    value = mapping.get(key)
    return value if isinstance(value, dict) else None


def tool_use(call_id: str, name: str, arguments: str) -> ToolUsePart:
    """A wire ``tool_use`` part from a call whose arguments arrived as JSON text."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        raise MalformedResponseError(f"tool call {name!r} has arguments that are not JSON") from exc
    if not isinstance(parsed, dict):
        raise MalformedResponseError(f"tool call {name!r} has arguments that are not an object")
    return {"type": "tool_use", "call_id": call_id, "name": name, "input": parsed}


def text_part(text: str) -> TextPart:
    return {"type": "text", "text": text}


def no_usage() -> Usage:
    return Usage(input_tokens=None, output_tokens=None)


@dataclass(slots=True)
class PendingCall:
    call_id: str
    name: str
    fragments: list[str] = field(default_factory=list)


class ToolCallAssembler:
    """Collects streamed tool calls by their stream position (output/content/choice index), so
    interleaved argument fragments of parallel calls land on the right call."""

    def __init__(self) -> None:
        self._calls: dict[int, PendingCall] = {}

    def start(self, index: int, call_id: str, name: str) -> None:
        self._calls[index] = PendingCall(call_id, name)

    def add(self, index: int, fragment: str) -> None:
        call = self._calls.get(index)
        if call is None:
            raise MalformedResponseError(f"argument fragment for unknown tool call #{index}")
        call.fragments.append(fragment)

    def has(self, index: int) -> bool:
        return index in self._calls

    def parts(self) -> dict[int, ToolUsePart]:
        return {
            index: tool_use(call.call_id, call.name, "".join(call.fragments))
            for index, call in self._calls.items()
        }


def as_provider_sees_it(request: ModelRequest) -> ModelRequest:
    """``request`` with each call id threads minted (for a provider id outside the call_id
    pattern) replaced by the provider's own id: a provider only knows the ids it issued."""
    ids = request.provider_call_ids
    if not ids:
        return request

    def swapped(message: Message) -> Message:
        if message["role"] == "tool":
            return {**message, "call_id": ids.get(message["call_id"], message["call_id"])}
        if message["role"] == "user":
            return message
        parts: list[OutputPart] = [
            {**part, "call_id": ids.get(part["call_id"], part["call_id"])}
            if part["type"] == "tool_use" else part
            for part in message["content"]
        ]
        return {**message, "content": parts}

    return replace(request, messages=[swapped(m) for m in request.messages])


def text_of(content: Sequence[InputPart | OutputPart | ResultPart]) -> str:
    """The text parts of a Render v1 message, joined (tool_use parts are rendered separately)."""
    return "".join(part["text"] for part in content if part["type"] == "text")
