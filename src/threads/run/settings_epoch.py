"""Settings epochs: which model a request goes to, and the ``settings_changed`` a run records
to switch. A thread starts on its pinned model; after too many overloads the run falls back to
the next model the pinned ``policy.fallback`` lists (``reason: fallback``, reasoning of the
earlier epoch omitted), and a fallback with ``fallback_scope: turn`` ends at the next input
(``reason: revert``, back to the pinned settings). Render v1 line 0 follows the epoch in force,
so the recorded request and the one sent agree.

A ``before_model_switch`` hook may have refused that revert: its ``hook_decision`` (``deny``, or
``failed``: a gating hook's failure denies) names the input that caused the revert
(``input_event_id``). Hook decisions are durable before the work they gate and never asked
again, so a run that finds one for the open turn's input (a resumed run, or a branch another
writer began) neither reverts nor asks: the turn stays on the fallback. This implementation
runs no hooks of its own; it honours the decisions a log holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.log.lines import Draft, Event
from threads.log.vocabulary import (
    ModelRef,
    ModelSettings,
    SettingsChangedData,
    data_of,
    draft,
)
from threads.models.protocol import Model
from threads.run.drafts import HOST
from threads.run.retry_policy import pinned_retry
from threads.run.runtime import Runtime

SWITCH_HOOK = "before_model_switch"
DENYING = ("deny", "failed")  # a gating hook's failure denies (the schema's hook_decision)


def current_model(rt: Runtime) -> Model | None:
    """The agent's model for the settings epoch in force; None when the agent has none by the
    name the epoch names (its fallback list no longer holds it)."""
    settings = rt.fold.features.settings
    if settings is None:
        return rt.spec.model
    return _model_named(rt, settings["model"])


def fallback(rt: Runtime, cause_event_id: str) -> list[Draft]:
    """The switch to the next fallback model after the one in force, or [] when there is none
    (or the agent no longer has it)."""
    entries = rt.fold.policy.get("fallback") or []
    current = rt.fold.settings["model"]
    names = [entry["model"] for entry in entries]
    after = names.index(current) + 1 if current in names else 0
    for entry in entries[after:]:
        if _model_named(rt, entry["model"]) is not None:
            data: SettingsChangedData = {
                "cause_event_id": cause_event_id, "reason": "fallback", "settings": entry,
            }
            return [draft("settings_changed", data, HOST)]
    return []


def revert(rt: Runtime) -> list[Draft]:
    """Back to the pinned settings when a turn-scoped fallback began before the open turn."""
    fold = rt.fold
    event, turn = fold.features.settings_event, fold.turn
    if (
        event is None
        or turn is None
        or data_of(event, "settings_changed")["reason"] != "fallback"
    ):
        return []
    if event.seq > turn.input_event.seq or pinned_retry(fold.thread_started).fallback_scope != (
        "turn"
    ):
        return []
    if revert_denied(fold.events, turn.input_event):
        return []
    started = fold.thread_started
    assert started is not None  # a settings_changed follows thread_started
    settings: ModelSettings = {
        "adapter": started["adapter"],
        "model": started["model"],
        "model_params": started["model_params"],
        "reasoning_carryover": "keep",
    }
    data: SettingsChangedData = {
        "cause_event_id": turn.input_event.event_id, "reason": "revert", "settings": settings,
    }
    return [draft("settings_changed", data, HOST)]


def revert_denied(events: Sequence[Event], cause: Event) -> bool:
    """Whether a ``before_model_switch`` hook refused the revert ``cause`` (the open turn's
    input) would make: a ``deny`` or ``failed`` decision keyed to it, recorded after it."""
    for event in reversed(events):
        if event.seq <= cause.seq:
            return False
        if event.type != "hook_decision":
            continue
        decided = data_of(event, "hook_decision")
        if (
            decided["hook"] == SWITCH_HOOK
            and decided.get("input_event_id") == cause.event_id
            and decided["decision"] in DENYING
        ):
            return True
    return False


def _model_named(rt: Runtime, ref: ModelRef) -> Model | None:
    for model in (rt.spec.model, *rt.spec.fallback):
        if model.name == ref["name"] and model.provider == ref["provider"]:
            return model
    return None
