"""Extensions and their hooks: code an agent runs at named points of a run, whose every decision
is recorded as a ``hook_decision`` before the run acts on it.

An ``Extension`` is a name and up to five hooks: ``before_tool_result`` (may ``redact`` spans
of a tool result or ``deny`` it, before the model sees it), ``before_compact`` (may ``deny`` a
compaction or ``guide`` its summary with a reason), ``after_compact`` (told of a compaction
that was recorded), ``subagent_start`` (may ``deny`` a ``spawn_agent`` call before its child
exists) and ``subagent_stop`` (may send a child that ended back to work, ``continue`` with a
reason; see ``threads.run.subagent_hooks``). A hook that raises, or answers a decision its
point does not allow, is recorded ``failed``; the run then acts as for a deny (for
``subagent_stop``, as for ``stop``). Hooks run one at a time in the agent's order, each given
the same view. A decision is a fact of the log: a rerun reads it back and
never asks the hook again (``recorded``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from threads.errors import ConfigError
from threads.log.lines import Draft, Event
from threads.log.vocabulary import (
    HookDecisionData,
    data_of,
    draft,
)
from threads.run.drafts import HOST

HookPoint = Literal[
    "before_tool_result", "before_compact", "after_compact", "subagent_start", "subagent_stop"
]
Verdict = Literal["proceed", "deny", "guide", "redact", "allow", "stop", "continue", "failed"]
_ALLOWED: dict[HookPoint, frozenset[str]] = {
    "before_tool_result": frozenset({"proceed", "deny", "redact"}),
    "before_compact": frozenset({"proceed", "deny", "guide"}),
    "after_compact": frozenset({"proceed"}),
    "subagent_start": frozenset({"allow", "deny"}),
    "subagent_stop": frozenset({"stop", "continue"}),
}
# What the default ``HookDecision()`` (no objection) is recorded as where ``proceed`` is not
# one of the point's decisions.
_NO_OBJECTION: dict[HookPoint, Verdict] = {"subagent_start": "allow", "subagent_stop": "stop"}


@dataclass(frozen=True, slots=True)
class HookDecision:
    """What a hook answers. ``spans``: half-open UTF-8 byte ranges of the result's text to
    redact (``redact`` only); ``reason``: why, for ``guide`` the line the summarizer gets, for
    ``continue`` the child's next input. ``proceed`` (the default) is no objection: recorded
    ``allow`` by ``subagent_start``, ``stop`` by ``subagent_stop``."""

    decision: Literal[
        "proceed", "deny", "guide", "redact", "allow", "stop", "continue"
    ] = "proceed"
    reason: str | None = None
    spans: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ToolResultView:
    """A tool's result about to be recorded, before the model sees it: ``text`` is what it
    would be shown."""

    call_id: str
    tool: str
    text: str


@dataclass(frozen=True, slots=True)
class CompactView:
    """A compaction about to summarize events ``from_seq..to_seq``."""

    trigger: str
    from_seq: int
    to_seq: int


@dataclass(frozen=True, slots=True)
class CompactedView:
    """A compaction just recorded: ``summary`` now stands for ``from_seq..to_seq``."""

    trigger: str
    from_seq: int
    to_seq: int
    summary: str


@dataclass(frozen=True, slots=True)
class SubagentStartView:
    """A ``spawn_agent`` call about to start a child (nothing is recorded for it yet)."""

    call_id: str
    agent: str
    prompt: str
    background: bool
    isolation: str


@dataclass(frozen=True, slots=True)
class SubagentStopView:
    """A child that ended, before its end is recorded in the parent's log. ``status``:
    ``completed``, ``failed``, ``cancelled`` or ``budget_exhausted``; ``output``: what the
    parent would be told; ``continuations``: how often it was already sent back."""

    call_id: str
    agent: str
    child_thread_id: str
    status: str
    output: str
    continuations: int


@dataclass(frozen=True, slots=True)
class Extension:
    """Hooks an agent runs (``agent(extensions=[...])``), under a name its decisions are
    recorded by. Each hook is an async function of its point's view (``ToolResultView``,
    ``CompactView``, ``CompactedView``, ``SubagentStartView``, ``SubagentStopView``, each
    exported by ``threads``) answering a ``HookDecision``. Hooks are code, not config: they are
    not pinned with the thread."""

    name: str
    before_tool_result: Callable[[ToolResultView], Awaitable[HookDecision]] | None = None
    before_compact: Callable[[CompactView], Awaitable[HookDecision]] | None = None
    after_compact: Callable[[CompactedView], Awaitable[HookDecision]] | None = None
    subagent_start: Callable[[SubagentStartView], Awaitable[HookDecision]] | None = None
    subagent_stop: Callable[[SubagentStopView], Awaitable[HookDecision]] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("invalid_config", "an Extension needs a non-empty name")


def check_extensions(extensions: Sequence[Extension]) -> tuple[Extension, ...]:
    names = [e.name for e in extensions]
    if not all(isinstance(e, Extension) for e in extensions):
        raise ConfigError("invalid_config", "extensions must be threads.Extension values")
    if len(set(names)) != len(names):
        raise ConfigError("duplicate_name", "two extensions have the same name")
    return tuple(extensions)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A hook's decision as recorded, and the ``hook_decision`` to append for it."""

    verdict: Verdict
    reason: str | None
    spans: tuple[tuple[int, int], ...]
    draft: Draft


View = ToolResultView | CompactView | CompactedView | SubagentStartView | SubagentStopView
Hook = (
    Callable[[ToolResultView], Awaitable[HookDecision]]
    | Callable[[CompactView], Awaitable[HookDecision]]
    | Callable[[CompactedView], Awaitable[HookDecision]]
    | Callable[[SubagentStartView], Awaitable[HookDecision]]
    | Callable[[SubagentStopView], Awaitable[HookDecision]]
)


async def ask(
    extension: Extension, point: HookPoint, hook: Hook, view: View, *,
    call_id: str | None = None,
) -> Outcome:
    """Run one hook; an exception or a decision ``point`` does not allow is ``failed``."""
    verdict: Verdict
    reason: str | None
    spans: tuple[tuple[int, int], ...]
    try:
        answer = await hook(view)  # type: ignore[arg-type]  # each hook gets its point's view
    except Exception as exc:  # a hook's failure is recorded, never raised into the run
        verdict, reason, spans = "failed", f"{type(exc).__name__}: {exc}", ()
    else:
        decided: str | None = answer.decision if isinstance(answer, HookDecision) else None
        if decided == "proceed" and point in _NO_OBJECTION:
            decided = _NO_OBJECTION[point]
        if decided in _ALLOWED[point] and isinstance(answer, HookDecision):
            verdict, reason, spans = cast(Verdict, decided), answer.reason, answer.spans
        else:
            verdict, spans = "failed", ()
            reason = f"{point} answered {answer!r}, not one of {sorted(_ALLOWED[point])}"
    return Outcome(
        verdict, reason, spans, decision_draft(extension.name, point, verdict, call_id, reason)
    )


def decision_draft(
    extension: str, point: HookPoint, verdict: Verdict, call_id: str | None, reason: str | None
) -> Draft:
    """A ``hook_decision`` as recorded (actor host)."""
    data: HookDecisionData = {"decision": verdict, "extension": extension, "hook": point}
    if reason:
        data["reason"] = reason
    if call_id is not None:
        data["call_id"] = call_id
    return draft("hook_decision", data, HOST)


def recorded(events: Sequence[Event], point: HookPoint, since: int) -> dict[str, Event]:
    """The ``point`` decisions recorded after seq ``since``, by extension (the newest)."""
    found: dict[str, Event] = {}
    for event in reversed(events):
        if event.seq <= since:
            break
        if event.type == "hook_decision":
            data = data_of(event, "hook_decision")
            if data["hook"] == point:
                found.setdefault(data["extension"], event)
    return found
