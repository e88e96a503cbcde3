"""The ``handoff`` tool and the system line an agent with ``handoffs=[...]`` pins.

The tool is never executed: a run carries out its calls (``threads.run.handoff``). This module
holds only what the pinned config is made of, so ``threads.run.config`` can name it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from threads.tools.tool import RunContext, Tool, tool

HANDOFF = "handoff"


class HandoffInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, description="The name of the agent to hand over to.")


async def _never(args: HandoffInput, ctx: RunContext) -> str:
    raise RuntimeError("handoff is carried out by the run, never executed")


def handoff_tool() -> Tool:
    return tool(
        name=HANDOFF,
        description="Hand this conversation to another agent, which continues it in its own"
        " thread. Nothing else you asked for in this reply is done.",
        input=HandoffInput, execute=_never, effect="read_only",
    )


def handoff_line(names: Sequence[str]) -> str:
    """The system line the agent's pinned instructions end with."""
    return f"Agents you can hand the conversation to: {', '.join(names)}."
