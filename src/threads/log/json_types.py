"""JSON as types: ``JsonValue`` is any value a JSON document can carry and ``JsonObject`` a JSON
object. Free JSON (tool input, provider payloads, schemas) is typed with these rather than
``Any``, so a reader narrows a value before it uses it."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JsonObject", "JsonValue"]

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"
