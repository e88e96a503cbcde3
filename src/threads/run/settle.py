"""Settling a call that may already have taken effect, by proof or by parking.

Order of proof: a recorded commit (materialize its result) → a recorded resolution → the effect
class pinned at call time: ``idempotent`` resends with the same key inside the dedup window
counted from the FIRST attempt; ``reconcilable`` asks ``lookup`` and trusts a not-found only when
finality is ``final``; ``sandbox_local`` is interrupted once its process is proven gone;
``unguarded`` and unknown tools park. Only ``safe_to_retry``, ``not_sent`` and ``assume_not_done``
ever allow another dispatch, always with the same effect key and ``attempt + 1``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threads.errors import StoreError
from threads.log.reduce import Call
from threads.tools.tool import Found, LookupUnknown, NotFound, Tool

if TYPE_CHECKING:
    from threads.run.calls import CallRunner

PARK_TTL_MS = 24 * 60 * 60 * 1000
PROVIDER_CLOCK_SKEW_MS = 1000
RETRY_RESOLUTIONS = ("safe_to_retry", "not_sent", "assume_not_done")


class Settler:
    def __init__(self, runner: CallRunner) -> None:
        self.runner = runner

    @property
    def loop(self):  # type: ignore[no-untyped-def]
        return self.runner.loop

    async def settle(self, call: Call) -> bool:
        """Settle ``call``; True when it is (or stays) parked."""
        loop = self.loop
        writer = loop.writer
        actor = {"kind": "recovery"}
        if call.effect == "committed":
            text = await self._artifact_text(call.result_ref)
            await self.runner.close(
                call, text, origin="materialized_from_commit", actor=loop.actor()
            )
            return False
        if call.effect == "resolved":
            return await self._after_resolution(call)
        if call.parked:
            return True
        if call.effect == "begun":
            await writer.append(
                [
                    (
                        "effect_unknown",
                        {"call_id": call.call_id, "reason": "crash_after_begin"},
                        actor,
                    )
                ]
            )
        tool = loop.agent.tool_named(call.name)
        effect_class = call.effect_class
        if tool is None or call.spec is None:
            return await self.park(call)
        if effect_class == "read_only":
            await self.runner.dispatch(call, tool)
            return False
        if effect_class == "idempotent":
            return await self._idempotent(call, tool)
        if effect_class == "reconcilable":
            return await self._reconcile(call, tool)
        if effect_class == "sandbox_local":
            return await self._sandbox_local(call)
        return await self.park(call)

    async def _after_resolution(self, call: Call) -> bool:
        loop = self.loop
        tool = loop.agent.tool_named(call.name)
        outcome = call.resolution
        if outcome == "confirmed_success":
            text = await self._artifact_text(call.result_ref)
            await self.runner.close(call, text, origin="executed", actor=loop.actor())
            return False
        if outcome in RETRY_RESOLUTIONS:
            if tool is None:
                return await self.park(call)
            await self.runner.dispatch(call, tool)
            return False
        if outcome == "assume_done":
            text = "assumed done by an operator; not sent again"
            await self.runner.close(
                call, text, origin="executed", is_error=False, actor=loop.actor()
            )
            return False
        if outcome == "interrupted":
            await self.runner.close(
                call, _interrupted_text(call), origin="interrupted", actor=loop.actor()
            )
            return False
        return await self.park(call)

    async def _idempotent(self, call: Call, tool: Tool) -> bool:
        window = call.spec.get("dedup_window_ms") if call.spec else None
        first = call.first_begin_time
        now = self.loop.now()
        if window is None or first is None or now + PROVIDER_CLOCK_SKEW_MS - first >= window:
            return await self.park(call)
        await self._resolve(call, "safe_to_retry", "provider_dedup")
        await self.runner.dispatch(call, tool)
        return False

    async def _reconcile(self, call: Call, tool: Tool) -> bool:
        reconcile = tool.reconcile
        if reconcile is None:
            return await self.park(call)
        await self.loop.writer.check()
        try:
            answer = await reconcile.lookup(
                call.effect_key, self.runner.context(call, call.attempt)
            )
        except StoreError:
            raise
        except Exception:
            answer = LookupUnknown("lookup raised")
        if isinstance(answer, Found):
            from threads.run.calls import result_text
            from threads.store.protocol import PendingArtifact
            from threads.store.rows import artifact_ref

            data = result_text(answer.value).encode("utf-8")
            ref = artifact_ref(data, "text/plain")
            await self.loop.writer.append(
                [
                    (
                        "effect_resolved",
                        {
                            "by": "reconcile",
                            "call_id": call.call_id,
                            "outcome": "confirmed_success",
                            "result_ref": ref,
                        },
                        {"kind": "recovery"},
                    )
                ],
                artifacts=[PendingArtifact(data, "text/plain")],
            )
            await self.runner.close(
                call, data.decode("utf-8"), origin="executed", actor=self.loop.actor()
            )
            return False
        if isinstance(answer, NotFound) and reconcile.finality == "final":
            await self._resolve(call, "safe_to_retry", "reconcile")
            await self.runner.dispatch(call, tool)
            return False
        return await self.park(call)

    async def _sandbox_local(self, call: Call) -> bool:
        sandbox = self.loop.agent.sandbox
        probe = getattr(sandbox, "process_state", None)
        state = "unknown" if probe is None else await probe(call.effect_key)
        if state != "terminated":
            return await self.park(call)
        await self._resolve(call, "interrupted", "sandbox_terminated")
        await self.runner.close(
            call, _interrupted_text(call), origin="interrupted", actor={"kind": "recovery"}
        )
        return False

    async def _resolve(self, call: Call, outcome: str, by: str) -> None:
        await self.loop.writer.append(
            [
                (
                    "effect_resolved",
                    {"by": by, "call_id": call.call_id, "outcome": outcome},
                    {"kind": "recovery"},
                )
            ]
        )

    async def park(self, call: Call) -> bool:
        if not call.parked:
            await self.loop.writer.append(
                [
                    (
                        "parked",
                        {
                            "address": {"id": call.effect_key, "kind": "effect"},
                            "expires_at": self.loop.now() + PARK_TTL_MS,
                            "reason": "effect_unknown",
                        },
                        {"kind": "recovery"},
                    )
                ]
            )
        return True

    async def _artifact_text(self, ref: dict[str, Any] | None) -> str:
        if ref is None:
            return ""
        data: bytes = await self.loop.writer.store.get_artifact(ref["sha256"])
        return data.decode("utf-8", errors="replace")


def _interrupted_text(call: Call) -> str:
    if call.unknown_reason == "timeout":
        return "interrupted: timed out; the command may have partly run"
    return "interrupted: the process was stopped; the command may have partly run"
