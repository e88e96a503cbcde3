"""Settling a call that may already have taken effect, by proof or by parking.

Order of proof: a recorded commit (materialize its result) → a recorded resolution → the effect
class pinned at call time: ``idempotent`` resends with the same key inside the dedup window
counted from the FIRST attempt; ``reconcilable`` asks ``lookup`` and trusts a not-found only when
finality is ``final``; ``sandbox_local`` is interrupted once its process is proven gone;
``unguarded`` and unknown tools park. Only ``safe_to_retry``, ``not_sent`` and ``assume_not_done``
ever allow another dispatch, always with the same effect key and ``attempt + 1``.

``settle`` records what it proved and returns what comes next: ``Retry`` (the scheduler
dispatches again), ``Closed`` (the call has its result) or ``Parked`` (a person decides). It never
dispatches.
"""

from __future__ import annotations

from dataclasses import dataclass

from threads.errors import StoreError
from threads.log.reduce import Call
from threads.run.drafts import RECOVERY, Draft
from threads.run.record import close, result_text, stored_text
from threads.run.runtime import Runtime
from threads.sandbox.protocol import SandboxError
from threads.store.protocol import PendingArtifact
from threads.store.rows import artifact_ref
from threads.tools.tool import Found, LookupOutcome, LookupUnknown, NotFound, Tool

PARK_TTL_MS = 24 * 60 * 60 * 1000
PROVIDER_CLOCK_SKEW_MS = 1000
RETRY_RESOLUTIONS = ("safe_to_retry", "not_sent", "assume_not_done")


@dataclass(frozen=True, slots=True)
class Retry:
    """A resolution that allows another dispatch is recorded: send again, same key."""


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
    if call.parked:
        return Parked()
    if call.effect == "begun":
        unknown = {"call_id": call.call_id, "reason": "crash_after_begin"}
        await rt.writer.append([Draft("effect_unknown", unknown, RECOVERY)])
    tool = rt.spec.tool_named(call.name)
    if tool is None or call.spec is None:
        return await park(rt, call)
    effect_class = call.effect_class
    if effect_class == "read_only":
        return Retry()
    if effect_class == "idempotent":
        return await _idempotent(rt, call)
    if effect_class == "reconcilable":
        return await _reconcile(rt, call, tool)
    if effect_class == "sandbox_local":
        return await _sandbox_local(rt, call)
    return await park(rt, call)


async def _after_resolution(rt: Runtime, call: Call) -> Settled:
    outcome = call.resolution
    if outcome == "confirmed_success":
        text = await stored_text(rt, call.result_ref)
        await close(rt, call, text, origin="executed", actor=rt.actor())
        return Closed()
    if outcome in RETRY_RESOLUTIONS:
        if rt.spec.tool_named(call.name) is None:
            return await park(rt, call)
        return Retry()
    if outcome == "assume_done":
        text = "assumed done by an operator; not sent again"
        await close(rt, call, text, origin="executed", is_error=False, actor=rt.actor())
        return Closed()
    if outcome == "interrupted":
        await close(rt, call, _interrupted_text(call), origin="interrupted", actor=rt.actor())
        return Closed()
    return await park(rt, call)


async def _idempotent(rt: Runtime, call: Call) -> Settled:
    window = call.spec.get("dedup_window_ms") if call.spec else None
    first = call.first_begin_time
    if window is None or first is None or rt.now() + PROVIDER_CLOCK_SKEW_MS - first >= window:
        return await park(rt, call)
    await _resolve(rt, call, "safe_to_retry", "provider_dedup")
    return Retry()


async def _reconcile(rt: Runtime, call: Call, tool: Tool) -> Settled:
    reconcile = tool.reconcile
    if reconcile is None:
        return await park(rt, call)
    await rt.writer.check()
    answer = await _lookup(rt, call, tool)
    if isinstance(answer, Found):
        data = result_text(answer.value).encode("utf-8")
        ref = artifact_ref(data, "text/plain")
        resolved = {
            "by": "reconcile",
            "call_id": call.call_id,
            "outcome": "confirmed_success",
            "result_ref": ref,
        }
        await rt.writer.append(
            [Draft("effect_resolved", resolved, RECOVERY)],
            artifacts=[PendingArtifact(data, "text/plain")],
        )
        await close(rt, call, data.decode("utf-8"), origin="executed", actor=rt.actor())
        return Closed()
    if isinstance(answer, NotFound) and reconcile.finality == "final":
        await _resolve(rt, call, "safe_to_retry", "reconcile")
        return Retry()
    return await park(rt, call)


async def _lookup(rt: Runtime, call: Call, tool: Tool) -> LookupOutcome:
    assert tool.reconcile is not None
    cancelled = rt.cancel.tool_started()
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


async def _resolve(rt: Runtime, call: Call, outcome: str, by: str) -> None:
    resolved = {"by": by, "call_id": call.call_id, "outcome": outcome}
    await rt.writer.append([Draft("effect_resolved", resolved, RECOVERY)])


async def park(rt: Runtime, call: Call) -> Parked:
    if not call.parked:
        data = {
            "address": {"id": call.effect_key, "kind": "effect"},
            "expires_at": rt.now() + PARK_TTL_MS,
            "reason": "effect_unknown",
        }
        await rt.writer.append([Draft("parked", data, RECOVERY)])
    return Parked()


def _interrupted_text(call: Call) -> str:
    if call.unknown_reason == "timeout":
        return "interrupted: timed out; the command may have partly run"
    return "interrupted: the process was stopped; the command may have partly run"
