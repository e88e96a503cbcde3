"""The context of a caller that is a given store: what a test uses to reach the sandboxes that
store's runs made (a provider refuses them to any other owner, ``OPEN_CONTEXT`` included)."""

from __future__ import annotations

from dataclasses import replace

from threads.sandbox import OPEN_CONTEXT, SandboxContext
from threads.store.capabilities import resources_of


async def as_store(store: object) -> SandboxContext:
    return replace(OPEN_CONTEXT, owner=await resources_of(store).owner_identity())
