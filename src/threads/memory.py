"""Memory adapters. ``mem0()`` is refused at setup: the mem0 SDK sends its requests with HTTP
clients (and, in hosted mode, background calls) that threads can't route through the transport
fence, so a run that lost its lease could still write memories. threads refuses it rather than
ship it with a weaker guarantee than every other adapter."""

from __future__ import annotations

from typing import Any, NoReturn

from threads.errors import ConfigError

MEM0_REFUSAL = (
    "mem0() can't be fenced: its SDK sends requests with its own HTTP clients that threads can't"
    " intercept, so a run that lost its lease could still write to memory. Keep memory in your"
    " own tools (effect='idempotent' or 'reconcilable' against your store) instead."
)


def mem0(*args: Any, **kwargs: Any) -> NoReturn:
    """Always ``ConfigError("transport_fence_unsupported")``; see the module docstring."""
    raise ConfigError("transport_fence_unsupported", MEM0_REFUSAL)
