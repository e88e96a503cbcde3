"""What an agent with ``output=Model`` pins, and the check every ``final_output`` candidate
gets: ``policy.output`` (the model's JSON schema, its ``schema_sha256``, mode ``tool``, and how
many failed candidates a turn may have), the ``final_output`` tool whose input is that schema,
and the schema check (``threads.log.output_eval``: the evaluator the reader applies to
an accepted value, ``format`` included). Reads the pinned policy only, so it judges a resumed
thread as the first run did; nothing here appends.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from threads.errors import ConfigError
from threads.log.fold import Fold
from threads.log.hashing import value_hash
from threads.log.json_types import (
    JsonObject,
    JsonValue,
)
from threads.log.output_eval import SchemaIssue, UnsupportedSchemaError, compile_schema, issues_of
from threads.log.vocabulary import (
    PolicyOutput,
)
from threads.tools.tool import RunContext, Tool, tool

FINAL_OUTPUT = "final_output"
ASK_ORIGIN = "final_output"
ASK_TEXT = "Return the final result by calling final_output."
DEFAULT_OUTPUT_RETRIES = 2


def output_policy_of(model: type[BaseModel], retries: int) -> PolicyOutput:
    """``policy.output`` for ``agent(output=model, output_retries=retries)``."""
    schema = checked_schema(model)
    return {"max_retries": retries, "mode": "tool", "schema": schema,
            "schema_sha256": value_hash(schema)}


def checked_schema(model: type[BaseModel]) -> JsonObject:
    """The model's JSON schema, refused (``invalid_config``) when it uses a keyword or format
    outside the evaluator's dialect: a run must never pin a schema no reader can apply."""
    schema = model.model_json_schema()
    try:
        compile_schema(schema)
    except UnsupportedSchemaError as exc:
        raise ConfigError("invalid_config", f"output {model.__name__}'s JSON schema is not"
                          f" supported: {exc}") from None
    return schema


def final_output_tool(model: type[BaseModel]) -> Tool:
    async def never(args: Any, ctx: RunContext) -> str:
        raise RuntimeError("final_output is validated by the run, never executed")

    return tool(name=FINAL_OUTPUT, description="Return the final structured result.",
                input=model, execute=never, effect="read_only")


def pinned_output(fold: Fold) -> PolicyOutput | None:
    return fold.policy.get("output")


def is_candidate(fold: Fold, name: str) -> bool:
    """A ``final_output`` call the run judges itself (the thread pins an output schema)."""
    return name == FINAL_OUTPUT and pinned_output(fold) is not None


def schema_errors(schema: JsonObject, value: JsonValue) -> list[SchemaIssue]:
    """What is wrong with ``value`` under ``schema`` (``output_validated``'s errors)."""
    return issues_of(schema, value)


def pointer(path: Any) -> str:
    return "/" + "/".join(str(p) for p in path)
