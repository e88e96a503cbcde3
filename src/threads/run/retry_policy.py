"""``RetryPolicy``: how a run retries a model request the provider refused for now, and when it
falls back to the agent's fallback model. Pinned in ``thread_started`` (``policy.retry``), so a
restarted run, in any process, follows the policy the thread started with.

A rate limit or overload is retried after ``Retry-After`` when the provider sent one (capped at
``max_retry_after_ms``), else after ``base_delay_ms × 2^(k−1)`` for the k-th retry of the step
(capped at ``max_delay_ms``); at most ``max_retries`` retries and ``max_total_wait_ms`` of waiting
per step. After ``fallback_after`` overloads in a row the run switches to the next fallback
model (``fallback_scope`` ``turn``: back to the primary at the next input; ``thread``: for good).
A request left in doubt by a crash or a cut stream is resent at most ``crash_resends`` times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Literal, cast

from threads.errors import ConfigError
from threads.log.vocabulary import PolicyRetry

Basis = Literal["retry_after", "backoff"]
FallbackScope = Literal["turn", "thread"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 8
    base_delay_ms: int = 1_000
    max_delay_ms: int = 32_000
    max_retry_after_ms: int = 60_000
    max_total_wait_ms: int = 600_000
    crash_resends: int = 2
    fallback_after: int = 2
    fallback_scope: FallbackScope = "turn"
    heartbeat_ms: int = 15_000

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name == "fallback_scope":
                continue
            floor = 0 if name in ("max_retries", "crash_resends") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < floor:
                raise ConfigError(
                    "invalid_config", f"RetryPolicy.{name} must be an integer >= {floor}"
                )
        if self.fallback_scope not in ("turn", "thread"):
            raise ConfigError("invalid_config", "RetryPolicy.fallback_scope is turn or thread")

    def to_wire(self) -> PolicyRetry:
        return cast("PolicyRetry", asdict(self))  # the fields are the wire's, by name

    def delay(self, retry: int, retry_after_ms: int | None) -> tuple[int, Basis]:
        """The wait before the ``retry``-th retry of a step (1-based), and what it is based on."""
        if retry_after_ms is not None:
            return min(max(retry_after_ms, 0), self.max_retry_after_ms), "retry_after"
        return min(self.base_delay_ms * 2 ** (retry - 1), self.max_delay_ms), "backoff"


DEFAULT_RETRY = RetryPolicy()


def pinned_retry(started: Mapping[str, Any] | None) -> RetryPolicy:
    """The thread's pinned retry policy; the defaults for a thread that pinned none."""
    wire = ((started or {}).get("policy") or {}).get("retry")
    if not wire:
        return DEFAULT_RETRY
    try:
        return _policy(tuple(wire.items()))
    except TypeError:  # an unhashable value, or an unknown field: built (and refused) anew
        return RetryPolicy(**wire)


@lru_cache(maxsize=64)
def _policy(fields: tuple[tuple[str, Any], ...]) -> RetryPolicy:
    """Each step asks for the policy again: build (and check) each pinned one once."""
    return RetryPolicy(**dict(fields))
