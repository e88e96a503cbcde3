"""How an MCP server's tools settle a call that a crash left in doubt: ``ToolEffect`` (a
per-tool override of the server's ``effect``), ``LookupTool`` (reconcile by calling another tool
of the same server) and ``McpResult`` (what such a lookup call answered).

Invariant: these are plain values, checked by ``threads.mcp.mcp`` when the server is described;
nothing here talks to a server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from threads.tools.tool import (
    EffectClass,
    Found,
    LookupOutcome,
    LookupUnknown,
    NotFound,
    Reconcile,
)

Finality = Literal["final", "nonfinal"]


@dataclass(frozen=True, slots=True)
class McpResult:
    """A ``tools/call`` answer, as a lookup reads it: the text parts joined by newlines, the
    structured content when the server sent some, and the server's ``isError``."""

    text: str
    structured: Mapping[str, Any] | None
    is_error: bool


def effect_key_argument(effect_key: str) -> dict[str, object]:
    """The default lookup arguments: ``{"effect_key": <the in-doubt call's key>}``."""
    return {"effect_key": effect_key}


def found_flag(result: McpResult) -> LookupOutcome:
    """The default reading of a lookup's answer: an object ``{"found": true, "result": ...}``
    or ``{"found": false}``, as structured content or as the text. ``found`` proves the call
    happened, ``result`` (or the whole text) is what the model is told it returned; anything
    else (an error, another shape) can't tell, and the call parks."""
    if result.is_error:
        return LookupUnknown("the lookup tool answered with an error")
    answer: object = result.structured
    if not isinstance(answer, Mapping) or "found" not in answer:
        try:
            answer = json.loads(result.text)
        except ValueError:
            return LookupUnknown("the lookup tool's answer is not {found: ...}")
    if not isinstance(answer, Mapping) or not isinstance(answer.get("found"), bool):
        return LookupUnknown("the lookup tool's answer is not {found: true|false}")
    if not answer["found"]:
        return NotFound()
    value = answer.get("result", result.text)
    return Found(value if isinstance(value, str) else json.dumps(value, sort_keys=True))


@dataclass(frozen=True, slots=True)
class LookupTool:
    """Reconcile an in-doubt call by calling ``tool``, another tool of the same server, with
    ``arguments(effect_key)``; ``read`` turns its answer into ``Found``/``NotFound``/
    ``LookupUnknown``. ``finality="final"`` means a not-found proves the call never took effect
    (it is then sent again, same key); ``nonfinal`` parks on not-found. The server must know
    the key: every effectful call carries it in ``_meta`` as ``threads/effect_key``."""

    tool: str
    finality: Finality = "nonfinal"
    arguments: Callable[[str], Mapping[str, object]] = effect_key_argument
    read: Callable[[McpResult], LookupOutcome] = found_flag


@dataclass(frozen=True, slots=True)
class ToolEffect:
    """One tool's effect class, overriding the server's: ``idempotent`` needs
    ``dedup_window_ms``; ``reconcilable`` needs ``reconcile`` (a ``LookupTool`` or your own
    ``threads.Reconcile``)."""

    effect: EffectClass
    dedup_window_ms: int | None = None
    reconcile: Reconcile | LookupTool | None = None
