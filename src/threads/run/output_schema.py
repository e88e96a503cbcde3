"""What an agent with ``output=Model`` pins, and the check every ``final_output`` candidate
gets: ``policy.output`` (the model's JSON schema, its ``schema_sha256``, mode ``tool``, and how
many failed candidates a turn may have), the ``final_output`` tool whose input is that schema,
and the schema check (``jsonschema`` Draft 2020-12: the same rule the reader applies to an
accepted value). Reads the pinned policy only, so it judges a resumed thread as the first run
did; nothing here appends.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from threads.log.hashing import value_hash
from threads.log.reduce import Fold
from threads.log.reduce_features import schema_validator
from threads.tools.tool import RunContext, Tool, tool

FINAL_OUTPUT = "final_output"
ASK_ORIGIN = "final_output"
ASK_TEXT = "Return the final result by calling final_output."
DEFAULT_OUTPUT_RETRIES = 2


def output_policy_of(model: type[BaseModel], retries: int) -> dict[str, Any]:
    """``policy.output`` for ``agent(output=model, output_retries=retries)``."""
    schema = model.model_json_schema()
    return {"max_retries": retries, "mode": "tool", "schema": schema,
            "schema_sha256": value_hash(schema)}


def final_output_tool(model: type[BaseModel]) -> Tool:
    async def never(args: Any, ctx: RunContext) -> str:
        raise RuntimeError("final_output is validated by the run, never executed")

    return tool(name=FINAL_OUTPUT, description="Return the final structured result.",
                input=model, execute=never, effect="read_only")


def pinned_output(fold: Fold) -> dict[str, Any] | None:
    output = ((fold.thread_started or {}).get("policy") or {}).get("output")
    return output if isinstance(output, dict) else None


def is_candidate(fold: Fold, name: str) -> bool:
    """A ``final_output`` call the run judges itself (the thread pins an output schema)."""
    return name == FINAL_OUTPUT and pinned_output(fold) is not None


def schema_errors(schema: dict[str, Any], value: Any) -> list[dict[str, str]]:
    """What is wrong with ``value`` under ``schema`` (``output_validated``'s errors)."""
    validator = schema_validator(json.dumps(schema, sort_keys=True))
    found = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    return [{"message": e.message, "path": pointer(e.absolute_path)} for e in found][:10]


def pointer(path: Any) -> str:
    return "/" + "/".join(str(p) for p in path)
