"""``ContextPolicy``: when a run compacts a long conversation, pinned in ``thread_started``
(``policy.context``) so every later run of the thread compacts by the same numbers.

The window a request must fit is the model's ``context_window`` minus ``reserve_tokens``. A turn
request whose estimate reaches ``compact_permille`` of that window is preceded by a compaction
that keeps at least ``keep_tail_tokens`` of the newest conversation verbatim; after
``max_failures`` failed compactions in a row (the breaker) the run stops trying until one
succeeds. A thread that pins no context policy never compacts on its own (an operator's
``Thread.compact`` still does). The wire form carries the format's whole ``Policy.context``
object; fields this implementation does not act on keep the reference's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from threads.errors import ConfigError

DEFAULT_WINDOW = 200_000  # a model absent from policy.models


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    reserve_tokens: int = 20_000
    compact_permille: int = 850
    keep_tail_tokens: int = 20_000
    max_failures: int = 3

    def __post_init__(self) -> None:
        for name in ("reserve_tokens", "compact_permille", "keep_tail_tokens", "max_failures"):
            value = getattr(self, name)
            floor = 0 if name in ("reserve_tokens", "keep_tail_tokens") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < floor:
                raise ConfigError(
                    "invalid_config", f"ContextPolicy.{name} must be an integer >= {floor}"
                )
        if self.compact_permille > 1000:
            raise ConfigError("invalid_config", "ContextPolicy.compact_permille is at most 1000")

    def to_wire(self) -> dict[str, Any]:
        return {
            "cache_ttl_ms": 300_000,
            "clear_results": {"exclude_tools": [], "keep_recent": 5, "trigger": {"permille": 700}},
            "compact": {
                "keep_tail": {"tokens": self.keep_tail_tokens},
                "max_failures": self.max_failures,
                "trigger": {"permille": self.compact_permille},
            },
            "defer_threshold": {"permille": 100},
            "defer_tools": "auto",
            "max_output_continuations": 3,
            "reserve_tokens": self.reserve_tokens,
            "restore": {
                "file_tokens": 5_000, "max_files": 5, "skill_tokens": 5_000,
                "skills_total_tokens": 25_000,
            },
            "server_edits": "disabled",
            "spill": {
                "head_bytes": 2_048, "request_budget_bytes": 204_800, "tail_bytes": 1_024,
                "threshold_bytes": 32_768,
            },
        }

    def threshold(self, window: int) -> int:
        return self.compact_permille * window // 1000


def _tokens(threshold: dict[str, int], window: int) -> int:
    if "tokens" in threshold:
        return threshold["tokens"]
    return threshold["permille"] * window // 1000


def pinned_context(started: dict[str, Any] | None) -> ContextPolicy | None:
    """The thread's pinned context policy (None: it pinned none, and never compacts itself).
    A permille ``keep_tail`` or a token ``trigger`` another writer pinned is read as the
    nearest form this policy holds (the tail in tokens of the pinned window, the trigger in
    permille)."""
    wire = ((started or {}).get("policy") or {}).get("context")
    if not wire:
        return None
    compact = wire["compact"]
    window = context_window(started) - wire["reserve_tokens"]
    trigger = compact["trigger"]
    permille = trigger.get("permille")
    if permille is None:
        permille = min(1000, trigger["tokens"] * 1000 // max(window, 1))
    return ContextPolicy(
        reserve_tokens=wire["reserve_tokens"],
        compact_permille=max(permille, 1),
        keep_tail_tokens=_tokens(compact["keep_tail"], window),
        max_failures=compact["max_failures"],
    )


def context_window(started: dict[str, Any] | None, model: dict[str, Any] | None = None) -> int:
    """The context window ``policy.models`` gives the model (the pinned one by default)."""
    started = started or {}
    model = model or started.get("model") or {}
    for entry in (started.get("policy") or {}).get("models", []):
        if entry.get("name") == model.get("name") and entry.get("provider") == model.get(
            "provider"
        ):
            return int(entry["context_window"])
    return DEFAULT_WINDOW
