"""What an operator is told about a parked effect: which call, how many dispatches, why its
outcome is unknown, and whether an earlier holder of the thread may still be sending it (then
until when, and what to do before and after). Read from the log alone, so a run's ``Parked``
result, ``Thread.parked_effects()`` and ``threads approvals`` say the same thing.
"""

from __future__ import annotations

from threads.log.reduce import Call, Fold
from threads.run.holders import earlier_holder, iso
from threads.tools.tool import DEFAULT_SETTLE_MS, Tool


def effect_park_detail(fold: Fold, call: Call, tool: Tool | None, now: int) -> str:
    """One paragraph for the parked effect of ``call`` (``tool``: the agent's, when known)."""
    settle_ms = tool.settle_ms if tool is not None else DEFAULT_SETTLE_MS
    reason = call.unknown_reason or "crash_after_begin"
    text = f"{call.name} (call {call.call_id}): outcome unknown ({reason}) after"
    text += f" {call.attempt} dispatch(es)"
    if tool is not None and call.attempt >= tool.max_attempts:
        text += f", all the tool allows ({tool.max_attempts})"
    text += "."
    window_end = dedup_window_end(call)
    if window_end is not None:
        text += (
            f" Its provider deduplicates the key only until {iso(window_end)} (the dedup window"
            " from the first dispatch), so threads does not send it again on its own."
        )
    holder = earlier_holder(fold, call, settle_ms)
    parked = _parked_at(fold, call)
    if holder is not None and parked is not None and parked < holder.until:
        if now < holder.until:
            text += (
                f" {holder.describe()[0].upper()}{holder.describe()[1:]} until {iso(holder.until)}:"
                " a request it already sent may still reach the provider, so a not-found proves"
                " nothing yet and assume_not_done is refused until then. Run the thread again"
                " after that (a final lookup is asked again), or resolve it assume_done."
            )
            return text
        text += (
            f" It parked while an earlier holder (epoch {holder.epoch}) could still have been"
            f" sending; that window ended at {iso(holder.until)}."
        )
    text += " Check the provider, then resolve it assume_done or assume_not_done."
    return text


def dedup_window_end(call: Call) -> int | None:
    """When the provider stops deduplicating an idempotent call's key (host clock): its dedup
    window counted from the first attempt. None for other classes or a call never begun."""
    window = call.spec.get("dedup_window_ms") if call.spec else None
    if call.effect_class != "idempotent" or window is None or call.first_begin_time is None:
        return None
    return int(call.first_begin_time + window)


def _parked_at(fold: Fold, call: Call) -> int | None:
    address = {"id": call.effect_key, "kind": "effect"}
    park = next(
        (e for e in reversed(fold.events) if e.type == "parked" and e.data["address"] == address),
        None,
    )
    return park.time if park is not None else None
