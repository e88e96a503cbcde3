"""Render v1 lines as types (LOG-FORMAT §6): line 0's declared prefix and the conversation
lines after it (user, assistant, tool, and the ``tools`` line a ``tools_changed`` renders).

``Message`` is what an adapter receives in ``ModelRequest.messages``: every line but ``tools``
(a new tool set reaches it as ``ModelRequest.tools``). The parts are the log's own shapes
(``threads.log.vocabulary``), so a line holds only JSON by construction.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict, cast

from threads.log.canonical import canonical
from threads.log.json_types import JsonObject, JsonValue
from threads.log.vocabulary import AdapterRef, InputPart, ModelRef, OutputPart, ResultPart

__all__ = [
    "AssistantLine",
    "DeclaredPrefix",
    "Line",
    "Message",
    "PrefixTool",
    "ToolLine",
    "ToolsLine",
    "UserLine",
    "line_bytes",
]


class UserLine(TypedDict):
    role: Literal["user"]
    content: list[InputPart]


class AssistantLine(TypedDict):
    role: Literal["assistant"]
    content: list[OutputPart]


class ToolLine(TypedDict):
    role: Literal["tool"]
    call_id: str
    is_error: bool
    content: list[ResultPart]
    late: NotRequired[bool]


class PrefixTool(TypedDict):
    """A ToolSpec as Render v1 shows it: a deferred tool only by name and description."""

    name: str
    description: str
    input_schema: NotRequired[JsonObject]
    deferred: NotRequired[bool]


class ToolsLine(TypedDict):
    role: Literal["tools"]
    tools: list[PrefixTool]


class DeclaredPrefix(TypedDict):
    """Line 0: the adapter, model and params of the settings epoch in force, system and tools."""

    adapter: AdapterRef
    model: ModelRef
    params: JsonObject
    system: str
    tools: list[PrefixTool]


Message: TypeAlias = "UserLine | AssistantLine | ToolLine"
Line: TypeAlias = "Message | ToolsLine"


def line_bytes(line: Line | DeclaredPrefix) -> bytes:
    """The canonical bytes of a line, newline included (its TypedDicts hold only JSON)."""
    return canonical(cast("JsonValue", line)) + b"\n"
