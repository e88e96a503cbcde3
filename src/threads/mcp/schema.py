"""An MCP tool's input schema: checked when the server is listed, then used as the agent
tool's input model.

The server's JSON Schema must be a valid Draft 2020-12 object schema that the log can pin
(canonical JSON, nested shallow enough to sit inside ``thread_started``, at most
``MAX_SCHEMA_BYTES``); otherwise the server's setup fails ``invalid_config`` naming the tool.
``arguments_model`` makes a Pydantic model that validates a call's arguments with that schema
(the real validator, before any effect) and reports the schema itself as its JSON schema, so the
pinned ToolSpec is the server's schema as it was listed.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.exceptions import best_match
from pydantic import BaseModel, ConfigDict, model_validator
from referencing import Registry

from threads.errors import ConfigError, LogError
from threads.log.canonical import canonical, parse_strict
from threads.log.json_types import JsonObject

MAX_SCHEMA_BYTES = 64 * 1024
# thread_started > data > tools > [i] > input_schema: the levels above a schema in its line
_PINNED_DEPTH = 5


def checked_schema(label: str, tool: str, schema: object) -> JsonObject:
    """The server's input schema for ``tool``, or ``invalid_config`` saying what is wrong."""
    where = f"{label}: tool {tool!r} has an input schema that"
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ConfigError("invalid_config", f"{where} is not an object schema (type: object)")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(
            "invalid_config", f"{where} is not valid JSON Schema (2020-12): {exc.message}"
        ) from None
    nested: object = schema
    for _ in range(_PINNED_DEPTH):
        nested = [nested]
    try:
        size = len(canonical(schema))
        parse_strict(canonical(nested))
    except (LogError, ValueError, TypeError) as exc:
        raise ConfigError(
            "invalid_config", f"{where} the log can't pin ({exc}); leave the tool out"
        ) from None
    if size > MAX_SCHEMA_BYTES:
        raise ConfigError(
            "invalid_config",
            f"{where} is {size} bytes; at most {MAX_SCHEMA_BYTES} are pinned. Leave the tool out",
        )
    return schema


class McpArguments(BaseModel):
    """A call's arguments for one MCP tool, checked against its input schema."""

    model_config = ConfigDict(frozen=True)
    schema_: ClassVar[JsonObject] = {}
    validator_: ClassVar[Draft202012Validator]
    tool_: ClassVar[str] = ""

    arguments: dict[str, Any]

    @model_validator(mode="before")
    @classmethod
    def _against_schema(cls, data: Any) -> Any:
        try:
            error = best_match(cls.validator_.iter_errors(data))
        except Exception as exc:  # a $ref that resolves nowhere, say: the server's mistake
            raise ValueError(
                f"invalid arguments for {cls.tool_}: its schema could not be applied ({exc})"
            ) from None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            raise ValueError(f"invalid arguments for {cls.tool_}: {where}: {error.message}")
        return {"arguments": data}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.schema_)


def arguments_model(agent_name: str, schema: JsonObject) -> type[McpArguments]:
    """The input model of the agent tool ``agent_name`` (its server tool's ``schema``)."""
    namespace = {
        "schema_": copy.deepcopy(schema),
        # an empty registry: a $ref resolves inside the schema, never by fetching a URL
        "validator_": Draft202012Validator(schema, registry=Registry()),
        "tool_": agent_name,
        "__module__": __name__,
    }
    return type(f"McpArguments_{agent_name}", (McpArguments,), namespace)
