"""``ContextPolicy``: when a run clears old tool results and compacts a long conversation,
pinned in ``thread_started`` (``policy.context``) so every later run of the thread acts by the
same numbers.

The window a request must fit is the model's ``context_window`` minus ``reserve_tokens``. A turn
request whose estimate reaches ``clear_permille`` of that window (or that follows ``idle_ms`` of
silence, when set) first clears the tool results the model has already seen, all but the newest
``keep_recent`` and those of ``exclude_tools`` (``context_edited``: the results stay stored, the
model sees a placeholder). One whose estimate reaches ``compact_permille`` is preceded by a
compaction that keeps at least ``keep_tail_tokens`` of the newest conversation verbatim; after
``max_failures`` failed compactions in a row (the breaker) the run stops trying until one
succeeds. A compaction re-attaches the newest ``restore_max_files`` files the sandbox file tools
touched in its range, each up to ``restore_file_tokens`` (a quarter token per byte). A thread
that pins no context policy never clears or compacts on its own (an operator's
``Thread.compact`` still compacts). The wire form carries the format's whole
``Policy.context`` object; fields this implementation does not act on keep the reference's
defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from threads.errors import ConfigError
from threads.log.vocabulary import PolicyContext, PolicyContextClearResults

DEFAULT_WINDOW = 200_000  # a model absent from policy.models


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    reserve_tokens: int = 20_000
    compact_permille: int = 850
    keep_tail_tokens: int = 20_000
    max_failures: int = 3
    clear_permille: int = 700
    keep_recent: int = 5
    exclude_tools: tuple[str, ...] = ()
    idle_ms: int | None = None
    cache_ttl_ms: int = 300_000
    restore_max_files: int = 5
    restore_file_tokens: int = 5_000

    def __post_init__(self) -> None:
        floors = {"reserve_tokens": 0, "keep_tail_tokens": 1, "keep_recent": 0,
                  "compact_permille": 1, "max_failures": 1, "clear_permille": 1,
                  "cache_ttl_ms": 1, "restore_max_files": 0, "restore_file_tokens": 0}
        if self.idle_ms is not None:
            floors["idle_ms"] = 1
        for name, floor in floors.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < floor:
                raise ConfigError(
                    "invalid_config", f"ContextPolicy.{name} must be an integer >= {floor}"
                )
        for name in ("compact_permille", "clear_permille"):
            if getattr(self, name) > 1000:
                raise ConfigError("invalid_config", f"ContextPolicy.{name} is at most 1000")
        if not all(isinstance(t, str) and t for t in self.exclude_tools):
            raise ConfigError("invalid_config", "ContextPolicy.exclude_tools holds tool names")

    def to_wire(self) -> PolicyContext:
        clear: PolicyContextClearResults = {
            "exclude_tools": sorted(set(self.exclude_tools)), "keep_recent": self.keep_recent,
            "trigger": {"permille": self.clear_permille},
        }
        if self.idle_ms is not None:
            clear["idle_ms"] = self.idle_ms
        return {
            "cache_ttl_ms": self.cache_ttl_ms,
            "clear_results": clear,
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
                "file_tokens": self.restore_file_tokens, "max_files": self.restore_max_files,
                "skill_tokens": 5_000,
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

    def clear_threshold(self, window: int) -> int:
        return self.clear_permille * window // 1000


def _permille(threshold: dict[str, int], window: int) -> int:
    """A pinned trigger as permille of the window (a token trigger read as the nearest)."""
    permille = threshold.get("permille")
    if permille is None:
        permille = min(1000, threshold["tokens"] * 1000 // max(window, 1))
    return max(permille, 1)


def _tokens(threshold: dict[str, int], window: int) -> int:
    if "tokens" in threshold:
        return threshold["tokens"]
    return threshold["permille"] * window // 1000


def pinned_context(started: Mapping[str, Any] | None) -> ContextPolicy | None:
    """The thread's pinned context policy (None: it pinned none, and never compacts itself).
    A permille ``keep_tail`` or a token ``trigger`` another writer pinned is read as the
    nearest form this policy holds (the tail in tokens of the pinned window, the trigger in
    permille)."""
    wire = ((started or {}).get("policy") or {}).get("context")
    if not wire:
        return None
    compact, clear = wire["compact"], wire["clear_results"]
    window = context_window(started) - wire["reserve_tokens"]
    return ContextPolicy(
        reserve_tokens=wire["reserve_tokens"],
        compact_permille=_permille(compact["trigger"], window),
        keep_tail_tokens=_tokens(compact["keep_tail"], window),
        max_failures=compact["max_failures"],
        clear_permille=_permille(clear["trigger"], window),
        keep_recent=clear["keep_recent"],
        exclude_tools=tuple(clear["exclude_tools"]),
        idle_ms=clear.get("idle_ms"),
        cache_ttl_ms=wire["cache_ttl_ms"],
        restore_max_files=wire["restore"]["max_files"],
        restore_file_tokens=wire["restore"]["file_tokens"],
    )


def context_window(
    started: Mapping[str, Any] | None, model: Mapping[str, Any] | None = None
) -> int:
    """The context window ``policy.models`` gives the model (the pinned one by default)."""
    started = started or {}
    model = model or started.get("model") or {}
    for entry in (started.get("policy") or {}).get("models", []):
        if entry.get("name") == model.get("name") and entry.get("provider") == model.get(
            "provider"
        ):
            return int(entry["context_window"])
    return DEFAULT_WINDOW
