"""The ``cache_breaks`` projection: which turn requests broke the provider's prompt cache, and
the likeliest reason (digest §1.9).

Each turn response (one answering a request that was not a summarizer's) whose usage has an
integer ``cache_read_tokens`` is compared with the previous such response: it is a break when
it read under 95% of what the previous one read (``20·now < 19·prev``) and at least 2,000
tokens less. The likely cause is the first ``settings_changed``, ``compacted``,
``context_edited`` or ``tools_changed`` recorded after the previous response; with none,
``ttl_expired`` when the request was sent more than the cache TTL after the previous response,
else ``unknown``. The entry names the request that broke it.
Invariant: folded incrementally from the events alone (no I/O); ``saved`` carries its state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

from threads.log.vocabulary import ThreadStartedData, Usage

DEFAULT_TTL_MS = 300_000
CAUSES = frozenset({"settings_changed", "compacted", "context_edited", "tools_changed"})
MIN_DROP = 2_000

Cause = Literal[
    "settings_changed", "compacted", "context_edited", "tools_changed", "ttl_expired", "unknown"
]


class CacheBreak(TypedDict):
    request_event_id: str
    likely_cause: Cause


def ttl_of(started: ThreadStartedData | None) -> int:
    context = None if started is None else started.get("policy", {}).get("context")
    return DEFAULT_TTL_MS if context is None else context.get("cache_ttl_ms", DEFAULT_TTL_MS)


@dataclass(slots=True)
class CacheBreaks:
    """The previous counted response (its cache read and time), the first cause since, and the
    breaks found so far."""

    previous: tuple[int, int] | None = None
    cause: Cause | None = None
    breaks: list[CacheBreak] = field(default_factory=list)

    def on_cause(self, kind: Cause) -> None:
        if self.previous is not None and self.cause is None:
            self.cause = kind

    def on_response(
        self, usage: Usage, request_event_id: str, request_time: int, response_time: int,
        started: ThreadStartedData | None,
    ) -> None:
        """A turn response's ``usage``; ``started`` pins the cache TTL, read only when a break
        has no recorded cause."""
        now = usage.get("cache_read_tokens")
        if not isinstance(now, int) or isinstance(now, bool):
            return
        if self.previous is not None:
            prev, prev_time = self.previous
            if 20 * now < 19 * prev and prev - now >= MIN_DROP:
                cause: Cause = self.cause or (
                    "ttl_expired" if request_time - prev_time > ttl_of(started) else "unknown"
                )
                self.breaks.append({"request_event_id": request_event_id, "likely_cause": cause})
        self.previous = (now, response_time)
        self.cause = None
