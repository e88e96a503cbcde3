"""How a turn goes on after a reply that asked for no tool, by the reply's stop reason.

``pause_turn`` (the provider paused a long turn): the same conversation is requested again with
nothing added, at most ``max_pause_continuations`` times a turn (then the turn ends ``error``).
``max_tokens``: a trusted continuation instruction is injected and the model asked again, at most
``max_output_continuations`` times a turn (then the turn ends ``max_output``).
``context_window_exceeded``: the text is not a finished answer; the turn ends
``context_exhausted``. Anything else ends the turn ``end_turn``. Both bounds come from the
thread's pinned policy (``policy.context``), 3 each when it has none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from threads.log.lines import (
    Event,
)
from threads.log.vocabulary import (
    InjectedData,
    TurnCompletedDataReason,
    data_of,
    draft,
)
from threads.run.drafts import HOST
from threads.run.output_schema import pinned_output
from threads.run.results import Completed, RunResult
from threads.run.runtime import Runtime
from threads.run.snapshots import snapshot_turn
from threads.run.structured import ask_for_output
from threads.run.turn import fail_turn, last_stop, last_text

DEFAULT_CONTINUATIONS = 3
CONTINUED = ("pause_turn", "max_tokens")  # replies the turn goes on after (within bounds)
CONTINUE_ORIGIN = "max_output"
CONTINUE_TEXT = (
    "Output limit reached. Continue exactly where you stopped. Do not repeat earlier output."
)


async def after_reply(rt: Runtime) -> RunResult | None:
    """End the turn, or return None after preparing the next request of the same turn."""
    stop = last_stop(rt.fold)
    if stop == "pause_turn":
        if _in_turn(rt, _is_pause) <= _bound(rt, "max_pause_continuations"):
            return None  # requested again as-is: the paused reply is already in the log
        return await fail_turn(
            rt, "model_error", "the model paused its turn more often than"
            " max_pause_continuations allows; run the thread again to ask it once more",
        )
    if stop == "context_window_exceeded":
        return await fail_turn(
            rt, "context_exhausted", "the reply was cut off by the model's context window, so"
            " its text is not a finished answer", "context_exhausted",
        )
    reason: TurnCompletedDataReason = "end_turn"
    if stop != "max_tokens" and pinned_output(rt.fold) is not None:
        return await ask_for_output(rt)  # plain text is no final_output: ask for one
    if stop == "max_tokens":
        if _in_turn(rt, _is_continuation) < _bound(rt, "max_output_continuations"):
            data: InjectedData = {
                "origin": {"id": CONTINUE_ORIGIN},
                "source": "recovery",
                "text": CONTINUE_TEXT,
                "trust": "trusted_instruction",
            }
            await rt.writer.append([draft("injected", data, HOST)])
            return None
        reason = "max_output"
    await rt.writer.append([draft("turn_completed", {"reason": reason}, HOST)])
    await snapshot_turn(rt)
    return Completed(rt.thread, last_text(rt.fold))


def _bound(rt: Runtime, key: str) -> int:
    context: Mapping[str, object] = rt.fold.policy.get("context") or {}
    value = context.get(key, DEFAULT_CONTINUATIONS)  # ``key`` is one of its integer limits
    return value if isinstance(value, int) else DEFAULT_CONTINUATIONS


def _is_pause(event: Event) -> bool | None:
    """True for a paused reply; None (stop counting) at any other reply."""
    if event.type == "model_response":
        return True if data_of(event, "model_response")["stop_reason"] == "pause_turn" else None
    if event.type == "model_response_recovered":
        recovered = data_of(event, "model_response_recovered")
        return True if recovered["stop_reason"] == "pause_turn" else None
    return False


def _is_continuation(event: Event) -> bool | None:
    if event.type != "injected":
        return False
    data = data_of(event, "injected")
    return data["source"] == "recovery" and data["origin"]["id"] == CONTINUE_ORIGIN


def _in_turn(rt: Runtime, counts: Callable[[Event], bool | None]) -> int:
    """How many events of the open turn, newest first, ``counts`` counts before it says stop."""
    turn = rt.fold.turn
    assert turn is not None
    total = 0
    for event in reversed(rt.fold.events):
        if event.seq <= turn.input_event.seq:
            break
        verdict = counts(event)
        if verdict is None:
            break
        total += bool(verdict)
    return total
