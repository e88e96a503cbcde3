"""What an operator is told about a parked effect: which call, how many dispatches, why its
outcome is unknown, what threads could prove and what it could not, whether an earlier holder
of the thread may still be sending it (then until when), and the risk of each resolution.

Read from the log alone (``park_facts``; the agent's tool adds its limits when known), so a
run's ``Parked`` result, ``Thread.parked_effects()``, ``threads approvals`` and the host's
inbox say the same thing. The facts hold no clock reading; the words are made for a given
``now`` (``effect_park_detail``, ``explain``), so facts kept by a cache keyed on the log's head
still give the right words later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from threads.log.fold import Call, Fold
from threads.log.json_types import JsonObject
from threads.log.lines import Event
from threads.log.vocabulary import data_of
from threads.run.holders import EarlierHolder, earlier_holder, iso
from threads.tools.tool import DEFAULT_SETTLE_MS, Tool


@dataclass(frozen=True, slots=True)
class ParkFacts:
    """One parked effect as the log tells it. ``max_attempts`` and ``finality`` are the
    agent's tool's (None when the reader has no agent with that tool). ``window``: the earlier
    holder that could still have been sending the call when it parked, if any."""

    effect_key: str
    call_id: str
    tool: str
    input: JsonObject
    effect_class: str
    attempts: int
    unknown_reason: str
    dedup_window_end: int | None
    parked_at: int | None
    window: EarlierHolder | None
    known_tool: bool
    max_attempts: int | None
    finality: str | None


@dataclass(frozen=True, slots=True)
class ParkExplanation:
    """A parked effect in plain words at one moment: what threads proved, what it could not,
    and what each resolution risks. ``not_done_refused_until``: ``assume_not_done`` is refused
    until then (an earlier holder may still be sending), else None."""

    proved: str
    unproved: str
    if_done: str
    if_not_done: str
    not_done_refused_until: int | None


def park_facts(
    fold: Fold, call: Call, tool: Tool | None, gone: frozenset[int] = frozenset()
) -> ParkFacts:
    """``gone``: the epochs whose holders are proven dead (``threads.run.holders``)."""
    settle_ms = tool.settle_ms if tool is not None else DEFAULT_SETTLE_MS
    holder = earlier_holder(fold, call, settle_ms, gone=gone)
    parked = _parked_at(fold, call)
    window = (
        holder
        if holder is not None and parked is not None and (holder.gone or parked < holder.until)
        else None
    )
    reconcile = tool.reconcile if tool is not None else None
    return ParkFacts(
        effect_key=call.effect_key,
        call_id=call.call_id,
        tool=call.name,
        input=call.input,
        effect_class=call.effect_class,
        attempts=call.attempt,
        unknown_reason=call.unknown_reason or "crash_after_begin",
        dedup_window_end=dedup_window_end(call),
        parked_at=parked,
        window=window,
        known_tool=tool is not None,
        max_attempts=tool.max_attempts if tool is not None else None,
        finality=reconcile.finality if reconcile is not None else None,
    )


def effect_park_detail(
    fold: Fold, call: Call, tool: Tool | None, now: int, gone: frozenset[int] = frozenset()
) -> str:
    """One paragraph for the parked effect of ``call`` (``tool``: the agent's, when known)."""
    return detail(park_facts(fold, call, tool, gone), now)


def detail(facts: ParkFacts, now: int) -> str:
    """The one-paragraph account the CLI and a run's ``Parked`` result give."""
    text = f"{facts.tool} (call {facts.call_id}): outcome unknown ({facts.unknown_reason}) after"
    text += f" {facts.attempts} dispatch(es)"
    if _exhausted(facts):
        text += f", all the tool allows ({facts.max_attempts})"
    text += "."
    if facts.dedup_window_end is not None:
        text += (
            f" Its provider deduplicates the key only until {iso(facts.dedup_window_end)} (the"
            " dedup window from the first dispatch), so threads does not send it again on its own."
        )
    window = facts.window
    final_lookup = facts.finality == "final"
    if window is not None and window.may_send(now):
        text += (
            f" {_capital(window.describe())} until {iso(window.until)}: a request it already"
            " sent may still reach the provider, so "
            + ("a not-found proves nothing yet and " if final_lookup else "")
            + "assume_not_done is refused until then. "
            + (
                "Run the thread again after that (its final lookup is asked again), or resolve"
                " it assume_done."
                if final_lookup
                else "Resolve it assume_done now if the provider shows it, or check the"
                " provider again after that and resolve it then."
            )
        )
        return text
    if window is not None and window.gone:
        text += (
            f" {_capital(window.describe())}; whether the call took effect before it died is"
            " unknown."
        )
    elif window is not None:
        text += (
            f" It parked while an earlier holder (epoch {window.epoch}) could still have been"
            f" sending; that window ended at {iso(window.until)}."
        )
    return text + _resolutions(facts)


def _resolutions(facts: ParkFacts) -> str:
    """What a person can do about a park no holder can still be sending: ask the lookup again
    (a tool with one), or check the provider and resolve it."""
    if facts.finality is not None:
        return (
            f" Run the thread again ({facts.tool}'s lookup is asked again), or check the"
            " provider and resolve it assume_done or assume_not_done."
        )
    if not facts.known_tool and facts.effect_class != "unguarded":  # the log says unguarded
        return " Check the provider, then resolve it assume_done or assume_not_done."
    return (
        f" {facts.tool} has no lookup, so only a person can tell: check the provider, then"
        " resolve it assume_done (it happened) or assume_not_done (it did not)."
    )


_HAPPENED = {
    "crash_after_begin": "was dispatched, and the process that sent it is gone: it stopped"
    " before it recorded what the provider answered",
    "timeout": "was sent and timed out before the provider answered",
    "transport_error": "was sent and the connection failed before an answer came back",
}


def explain(facts: ParkFacts, now: int) -> ParkExplanation:
    """What a person deciding this park should know, in words, at ``now``."""
    tool = facts.tool
    times = "once" if facts.attempts == 1 else f"{facts.attempts} times"
    happened = _HAPPENED.get(facts.unknown_reason, "has no recorded outcome")
    proved = (
        f"{tool} {happened} (dispatched {times}). threads wrote the dispatch down before it went"
        " out, so it knows the call may have taken effect and has not sent it again on its own."
    )
    window = facts.window
    refused_until = window.until if window is not None and window.may_send(now) else None
    if window is not None and refused_until is not None:
        proved += f" {_capital(window.describe())} until {iso(window.until)}."
    elif window is not None and window.gone:
        proved += f" {_capital(window.describe())}."
    elif window is not None:
        proved += (
            f" An earlier holder (epoch {window.epoch}) could still send it when it parked; that"
            f" window ended at {iso(window.until)}, so nothing is sending it now."
        )
    unproved = _unproved(facts, refused_until is not None)
    if _exhausted(facts):
        unproved += f" It has been dispatched {facts.attempts} times, all the tool allows."
    if_done = (
        f"It happened: threads records {tool} as done and the run goes on without sending it"
        " again. If it did not happen, it never will, unless someone does it by hand."
    )
    guarded = facts.effect_class in ("idempotent", "reconcilable")
    if_not_done = (
        f"It did not happen: threads sends {tool} again with the same key ({facts.effect_key})."
        f" If the first send did reach the provider, {tool} happens twice"
        + (" unless the provider still recognises that key" if guarded else "")
        + ", with these arguments."
    )
    if refused_until is not None:
        if_not_done += f" Refused until {iso(refused_until)}: the earlier holder may still send."
    return ParkExplanation(proved, unproved, if_done, if_not_done, refused_until)


def _unproved(facts: ParkFacts, holder_sending: bool) -> str:
    tool, cls = facts.tool, facts.effect_class
    prefix = (
        "" if facts.known_tool
        else f"No agent here has the {tool} tool, so nothing can look the effect up. "
    )
    if cls == "idempotent":
        until = (
            f"only until {iso(facts.dedup_window_end)}" if facts.dedup_window_end is not None
            else "for a window threads does not know"
        )
        why = (
            f"{tool} is idempotent, but its provider deduplicates the key {until}: a send after"
            " that could be applied again."
        )
    elif cls == "reconcilable":
        if facts.finality == "nonfinal":
            why = (
                f"{tool}'s lookup is not final: a not-found does not prove the call never"
                " happened."
            )
        elif holder_sending:
            why = (
                f"{tool}'s lookup is final, but a not-found proves nothing while an earlier"
                " holder may still send the call."
            )
        else:
            why = (
                f"{tool}'s lookup could not say whether it happened (it failed or answered"
                " unknown)."
            )
    elif cls == "sandbox_local":
        why = f"{tool}'s sandbox could not prove that every process of the call has stopped."
    elif cls == "unguarded":
        why = (
            f"{tool} is unguarded: it declares no lookup and no deduplication, so only a person"
            " who checks the provider can tell whether it applied the call."
        )
    else:
        why = f"threads cannot prove whether {tool} happened (effect class {cls})."
    return prefix + why


def _exhausted(facts: ParkFacts) -> bool:
    return facts.max_attempts is not None and facts.attempts >= facts.max_attempts


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def dedup_window_end(call: Call) -> int | None:
    """When the provider stops deduplicating an idempotent call's key (host clock): its dedup
    window counted from the first attempt. None for other classes or a call never begun."""
    window = call.spec.get("dedup_window_ms") if call.spec else None
    if call.effect_class != "idempotent" or window is None or call.first_begin_time is None:
        return None
    return int(call.first_begin_time + window)


def parked_event(fold: Fold, address: Mapping[str, object]) -> Event | None:
    """The last ``parked`` event of ``address`` on the branch."""
    return next(
        (e for e in reversed(fold.events)
         if e.type == "parked" and data_of(e, "parked")["address"] == address),
        None,
    )


def _parked_at(fold: Fold, call: Call) -> int | None:
    park = parked_event(fold, {"id": call.effect_key, "kind": "effect"})
    return park.time if park is not None else None
