"""``RunContext``: what a tool (and a reconcile lookup) may see of the run that calls it.

Invariant: nothing in it is ever written to the log; ``deps`` are the caller's own objects.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from threads.principal import Principal


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a tool's ``execute`` (and a reconcile ``lookup``) may see of the run. ``deps`` are
    the caller's and are never logged. ``effect_key`` is stable across retries of this call:
    pass it to your provider as its idempotency key."""

    deps: Any
    thread_id: str
    branch_id: str
    principal: Principal
    call_id: str
    effect_key: str
    attempt: int
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
