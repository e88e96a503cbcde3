"""Helpers of the sandbox tests: acting as a given store, and an agent whose first turn makes
its sandbox.

``as_store`` is the context of a caller that is that store: what a test uses to reach the
sandboxes the store's runs made (a provider refuses them to any other owner, ``OPEN_CONTEXT``
included). ``first_writes`` is an agent whose first turn writes one file (so its sandbox
exists) and whose later turns play ``later`` (the script is played by position).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from threads import agent
from threads.run.agent import Agent
from threads.sandbox import OPEN_CONTEXT, SandboxContext
from threads.store.capabilities import resources_of
from threads.testing.scripted import call, say, scripted_model, use


async def as_store(store: object) -> SandboxContext:
    return replace(OPEN_CONTEXT, owner=await resources_of(store).owner_identity())


def first_writes(
    provider: Any, path: str, content: str, *later: Any, snapshots: bool = False
) -> Agent:
    first = [use(call("write_file", path=path, content=content)), say("written")]
    return agent(name="coder", model=scripted_model([*first, *later]), sandbox=provider,
                 snapshots=snapshots)
