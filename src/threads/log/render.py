"""Render v1: the neutral, hashable form of a model request (LOG-FORMAT §6).

Line 1 is the declared prefix (adapter, model, params, system, tools); then one line per
transcript message. Every line is canonical JSON ending in ``\\n``. The bytes are what a
``model_request`` stores as its artifact, so a request can be replayed and compared exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from threads.log.canonical import canonical
from threads.log.hashing import sha256_hex
from threads.log.lines import Event

MEDIA_TYPE = "application/x-ndjson"


@dataclass(frozen=True, slots=True)
class Rendered:
    data: bytes
    prefix_bytes: int
    prefix_sha256: str
    prefix: dict[str, Any]
    messages: list[dict[str, Any]]

    def request_ref(self) -> dict[str, Any]:
        return {"bytes": len(self.data), "media_type": MEDIA_TYPE, "sha256": sha256_hex(self.data)}

    def declared_prefix(self) -> dict[str, Any]:
        return {"bytes": self.prefix_bytes, "sha256": self.prefix_sha256}


def declared_prefix(started: Mapping[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "adapter": started["adapter"],
        "model": started["model"],
        "params": started["model_params"],
        "system": started["instructions"],
        "tools": [
            {"description": t["description"], "input_schema": t["input_schema"], "name": t["name"]}
            for t in tools
        ],
    }


def tool_text(data: Mapping[str, Any], resolved: Mapping[str, str]) -> str:
    """The full text a tool result shows the model: its content, else its artifact, else the
    preview."""
    content = data.get("content")
    if content:
        return "".join(part.get("text", "") for part in content)
    ref = data.get("ref")
    if ref is not None and ref["sha256"] in resolved:
        return resolved[ref["sha256"]]
    return str(data["preview"])


def _message(event: Event, resolved: Mapping[str, str]) -> dict[str, Any] | None:
    data = event.data
    if event.type in ("user_input", "steer"):
        content = data.get("content") or [{"type": "text", "text": data.get("text", "")}]
        return {"role": "user", "content": content}
    if event.type in ("model_response", "model_response_recovered"):
        return {"role": "assistant", "content": data["content"]}
    if event.type == "tool_result":
        return {
            "role": "tool",
            "call_id": data["call_id"],
            "is_error": data["is_error"],
            "content": [{"type": "text", "text": tool_text(data, resolved)}],
        }
    return None


class RenderCache:
    """What a run has already rendered: the declared prefix line per tool set, and every
    event's message line. The log only grows and events never change, so each request renders
    only the events appended since the previous one."""

    def __init__(self) -> None:
        self._prefix: tuple[object, object, dict[str, Any], bytes] | None = None
        self._events: list[Event] | None = None
        self._seen = 0
        self._entries: list[tuple[dict[str, Any], bytes]] = []

    def prefix(
        self, started: Mapping[str, Any], tools: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], bytes]:
        cached = self._prefix
        if cached is not None and cached[0] is started and cached[1] is tools:
            return cached[2], cached[3]
        prefix = declared_prefix(started, tools)
        line = canonical(prefix) + b"\n"
        self._prefix = (started, tools, prefix, line)
        return prefix, line

    def entries(
        self, events: list[Event], resolved: Mapping[str, str]
    ) -> list[tuple[dict[str, Any], bytes]]:
        if events is not self._events or len(events) < self._seen:
            self._events, self._seen, self._entries = events, 0, []
        for event in events[self._seen :]:
            message = _message(event, resolved)
            if message is not None:
                self._entries.append((message, canonical(message) + b"\n"))
        self._seen = len(events)
        return self._entries


def render(
    started: Mapping[str, Any],
    tools: list[dict[str, Any]],
    events: list[Event],
    resolved: Mapping[str, str] | None = None,
    cache: RenderCache | None = None,
) -> Rendered:
    cache = cache if cache is not None else RenderCache()
    prefix, first = cache.prefix(started, tools)
    entries = cache.entries(events, resolved or {})
    data = first + b"".join(line for _, line in entries)
    return Rendered(data, len(first), sha256_hex(first), prefix, [m for m, _ in entries])
