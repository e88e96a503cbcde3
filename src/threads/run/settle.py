"""Settling a call that may already have taken effect, by proof or by parking.

Order of proof: a recorded commit (materialize its result) → a recorded resolution → the effect
class pinned at call time: ``idempotent`` resends with the same key inside the dedup window
counted from the FIRST attempt; ``reconcilable`` asks ``lookup`` and trusts a not-found only when
finality is ``final`` and no earlier holder may still be sending (``threads.run.holders``);
``sandbox_local`` is interrupted once its process is proven gone;
``unguarded`` and unknown tools park. Only ``safe_to_retry``, ``not_sent`` and ``assume_not_done``
ever allow another dispatch, always with the same effect key and ``attempt + 1``.

``settle`` records what it proved and returns what comes next: ``Retry`` (the scheduler
dispatches again), ``Closed`` (the call has its result) or ``Parked`` (a person decides). It never
dispatches. Every resend it decides on its own is bounded and waited for: a call that has had
``tool.max_attempts`` dispatches parks instead, and the resolution that allows a resend after a
timeout or transport error is recorded together with its ``retry_scheduled`` (backoff doubling
from ``tool.retry_backoff_ms``), which a later run honours until ``not_before``. A resend after
a crash (``crash_after_begin``) does not wait: the restart took its own time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from threads.errors import StoreError
from threads.log.fold import Call
from threads.log.vocabulary import (
    EffectResolvedData,
    EffectResolvedDataBy,
    EffectResolvedDataOutcome,
    EffectUnknownData,
    ParkedData,
    RetryScheduledData,
    draft,
)
from threads.run.authority import human_resolution, recorded_refusal
from threads.run.drafts import RECOVERY, resumed_data
from threads.run.holders import EarlierHolder, earlier_holder, iso, window_park_ends
from threads.run.park_info import dedup_window_end
from threads.run.record import close, stored_text
from threads.run.runtime import Runtime
from threads.sandbox.protocol import SandboxError
from threads.store.protocol import PendingArtifact
from threads.store.rows import artifact_ref
from threads.tools.encode import result_text
from threads.tools.tool import Found, LookupOutcome, LookupUnknown, NotFound, Tool

log = logging.getLogger("threads")
PARK_TTL_MS = 24 * 60 * 60 * 1000
PROVIDER_CLOCK_SKEW_MS = 1000
MAX_RETRY_DELAY_MS = 60_000
RETRY_RESOLUTIONS = ("safe_to_retry", "not_sent", "assume_not_done")


@dataclass(frozen=True, slots=True)
class Retry:
    """A resolution that allows another dispatch is recorded: send again, same key, not before
    ``not_before`` (a recorded ``retry_scheduled``) when it is set."""

    not_before: int | None = None


@dataclass(frozen=True, slots=True)
class Closed:
    """The call's ``tool_result`` is recorded."""


@dataclass(frozen=True, slots=True)
class Parked:
    """The effect is parked (``parked{kind: effect}``): a person resolves it."""


Settled = Retry | Closed | Parked


async def settle(rt: Runtime, call: Call) -> Settled:
    if call.effect == "committed":
        text = await stored_text(rt, call.result_ref)
        await close(rt, call, text, origin="materialized_from_commit", actor=rt.actor())
        return Closed()
    if call.effect == "resolved":
        return await _after_resolution(rt, call)
    if call.parked and not await _window_closed(rt, call):
        return Parked()
    if call.effect == "begun":
        unknown: EffectUnknownData = {"call_id": call.call_id, "reason": "crash_after_begin"}
        await rt.writer.append([draft("effect_unknown", unknown, RECOVERY)])
    tool = rt.spec.tool_named(call.name)
    if tool is None or call.spec is None:
        return await park(rt, call)
    effect_class = call.effect_class
    if effect_class == "read_only":
        return Retry()
    if effect_class == "idempotent":
        return await _idempotent(rt, call, tool)
    if effect_class == "reconcilable":
        return await _reconcile(rt, call, tool)
    if effect_class == "sandbox_local":
        return await _sandbox_local(rt, call)
    return await park(rt, call)


async def _after_resolution(rt: Runtime, call: Call) -> Settled:
    human = human_resolution(rt.fold, call.call_id)
    if human is not None:
        why = recorded_refusal(
            rt.fold,
            human.actor.get("principal"),
            tenant=rt.principal.tenant,
            agent_approvers=rt.spec.approvers,
        )
        if why is not None:
            # Not made: the effect stays in doubt, parked again for someone allowed to decide.
            log.warning(
                "call %s: the %s resolution is not accepted (%s)",
                call.call_id,
                call.resolution,
                why,
            )
            return await park(rt, call)
    outcome = call.resolution
    if outcome == "confirmed_success":
        text = await stored_text(rt, call.result_ref)
        await close(rt, call, text, origin="executed", actor=rt.actor())
        return Closed()
    if outcome in RETRY_RESOLUTIONS:
        if rt.spec.tool_named(call.name) is None:
            return await park(rt, call)
        return Retry(call.retry_not_before)
    if outcome == "assume_done":
        text = "assumed done by an operator; not sent again"
        await close(rt, call, text, origin="executed", is_error=False, actor=rt.actor())
        return Closed()
    if outcome == "interrupted":
        await close(rt, call, _interrupted_text(call), origin="interrupted", actor=rt.actor())
        return Closed()
    return await park(rt, call)


async def _idempotent(rt: Runtime, call: Call, tool: Tool) -> Settled:
    """Resend under the same key only while the provider still deduplicates it: the resend,
    after its backoff, must fall inside the window counted from the first attempt."""
    if not inside_dedup_window(call, rt.now() + backoff_ms(tool, call.attempt)):
        return await park(rt, call)
    return await _resend(rt, call, tool, "provider_dedup")


def inside_dedup_window(call: Call, send_at: int) -> bool:
    """Whether a send of ``call`` at ``send_at`` (host clock) still falls inside its provider's
    dedup window, counted from the first attempt, with the provider's clock skew allowed for."""
    end = dedup_window_end(call)
    return end is not None and send_at + PROVIDER_CLOCK_SKEW_MS < end


def resend_allowed(call: Call, now: int) -> bool:
    """Checked right before a resend is dispatched: one allowed by ``provider_dedup`` (an
    idempotent call's ``safe_to_retry``) goes out only while the window still holds. The
    resolution may have been recorded long ago (a crash, an outage, a long backoff wait), and
    a resend outside the window would be applied again. ``not_sent`` and ``assume_not_done``
    (proof the effect did not happen, or a person's decision) do not depend on it."""
    if call.effect_class != "idempotent" or call.resolution != "safe_to_retry":
        return True
    return inside_dedup_window(call, now)


async def _reconcile(rt: Runtime, call: Call, tool: Tool) -> Settled:
    reconcile = tool.reconcile
    if reconcile is None:
        return await park(rt, call)
    await rt.writer.check()
    answer = await _lookup(rt, call, tool)
    if isinstance(answer, Found):
        data = result_text(answer.value).encode("utf-8")
        ref = artifact_ref(data, "text/plain")
        resolved: EffectResolvedData = {
            "by": "reconcile",
            "call_id": call.call_id,
            "outcome": "confirmed_success",
            "result_ref": ref,
        }
        await rt.writer.append(
            [draft("effect_resolved", resolved, RECOVERY)],
            artifacts=[PendingArtifact(data, "text/plain")],
        )
        await close(rt, call, data.decode("utf-8"), origin="executed", actor=rt.actor())
        return Closed()
    if isinstance(answer, NotFound) and reconcile.finality == "final":
        holder = _sending_holder(rt, call, tool)
        if holder is None:
            return await _resend(rt, call, tool, "reconcile")
        log.warning(
            "call %s: not found, but %s until %s; parked",
            call.call_id,
            holder.describe(),
            iso(holder.until),
        )
    return await park(rt, call)


def _sending_holder(rt: Runtime, call: Call, tool: Tool) -> EarlierHolder | None:
    """The earlier holder that may still be sending this call's effect now, if any."""
    holder = earlier_holder(
        rt.fold,
        call,
        tool.settle_ms,
        current_epoch=rt.writer.epoch,
        taken_over_at=rt.writer.acquired_at,
        gone=rt.writer.gone_epochs(),
    )
    return holder if holder is not None and holder.may_send(rt.now()) else None


async def _window_closed(rt: Runtime, call: Call) -> bool:
    """A park the zombie window made (a final not-found while an earlier holder could still be
    sending) ends once the window is over: the park is resumed and the lookup asked again.
    Any other park stands."""
    address = rt.fold.parks.get(("effect", call.effect_key))
    ends = window_park_ends(rt.fold, call, rt.spec.tool_named(call.name), rt.writer.gone_epochs())
    if address is None or ends is None or rt.now() < ends:
        return False  # not a window park (a person decides), or its window is still open
    parked_at = resumed_data(rt.fold, address)
    await rt.writer.append([draft("resumed", parked_at, RECOVERY)])
    return True


async def _lookup(rt: Runtime, call: Call, tool: Tool) -> LookupOutcome:
    assert tool.reconcile is not None
    cancelled = rt.cancel.tool_started(f"the lookup of {tool.name}")
    try:
        return await tool.reconcile.lookup(
            call.effect_key, rt.tool_context(call, call.attempt, cancelled)
        )
    except StoreError:
        raise
    except Exception:
        return LookupUnknown("lookup raised")
    finally:
        rt.cancel.tool_ended(cancelled)


async def _sandbox_local(rt: Runtime, call: Call) -> Settled:
    """Interrupted once the sandbox proves every process of the call gone; never run again."""
    if await _termination(rt, call.effect_key) not in ("terminated", "already_exited"):
        return await park(rt, call)
    await _resolve(rt, call, "interrupted", "sandbox_terminated")
    await close(rt, call, _interrupted_text(call), origin="interrupted", actor=RECOVERY)
    return Closed()


async def _termination(rt: Runtime, effect_key: str) -> str:
    if rt.sandbox is None:
        # A sandbox object that is not a provider (a test double) may still answer the probe.
        probe = getattr(rt.spec.sandbox, "process_state", None)
        return "unknown" if probe is None else str(await probe(effect_key))
    try:
        return await rt.sandbox.terminate(effect_key)
    except SandboxError:
        return "unknown"


def backoff_ms(tool: Tool, attempts: int) -> int:
    """The wait before resending after ``attempts`` dispatches: doubling, at most a minute."""
    return min(tool.retry_backoff_ms << min(max(attempts - 1, 0), 30), MAX_RETRY_DELAY_MS)


async def _resend(rt: Runtime, call: Call, tool: Tool, by: EffectResolvedDataBy) -> Settled:
    """Allow one more dispatch (``safe_to_retry``) with its recorded wait, or park when the
    call has had all the dispatches its tool allows."""
    if call.attempt >= tool.max_attempts:
        return await park(rt, call)
    resolved: EffectResolvedData = {"by": by, "call_id": call.call_id, "outcome": "safe_to_retry"}
    drafts = [draft("effect_resolved", resolved, RECOVERY)]
    # A crash is no sign the provider is struggling, and the restart took its own time: only a
    # resend after a timeout or transport error (seen by a live run) waits.
    delay = 0 if call.unknown_reason == "crash_after_begin" else backoff_ms(tool, call.attempt)
    not_before = None
    if delay > 0:
        assert call.begin_event is not None  # an effect in doubt was begun
        not_before = rt.now() + delay
        retry: RetryScheduledData = {
            "basis": "backoff",
            "delay_ms": delay,
            "not_before": not_before,
            "request_event_id": call.begin_event.event_id,
        }
        drafts.append(draft("retry_scheduled", retry, RECOVERY))
    await rt.writer.append(drafts)
    return Retry(not_before)


async def _resolve(
    rt: Runtime, call: Call, outcome: EffectResolvedDataOutcome, by: EffectResolvedDataBy
) -> None:
    resolved: EffectResolvedData = {"by": by, "call_id": call.call_id, "outcome": outcome}
    await rt.writer.append([draft("effect_resolved", resolved, RECOVERY)])


async def park(rt: Runtime, call: Call) -> Parked:
    if not call.parked:
        data: ParkedData = {
            "address": {"id": call.effect_key, "kind": "effect"},
            "expires_at": rt.now() + PARK_TTL_MS,
            "reason": "effect_unknown",
        }
        await rt.writer.append([draft("parked", data, RECOVERY)])
    return Parked()


def _interrupted_text(call: Call) -> str:
    if call.unknown_reason == "timeout":
        return "interrupted: timed out; the command may have partly run"
    return "interrupted: the process was stopped; the command may have partly run"
