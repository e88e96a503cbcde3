"""The turn loop: decide the next step from the reduced log, make its intent durable, act, make
its outcome durable, repeat.

user_input → model_request (Render v1 artifact, durable before dispatch) → model →
model_response (+ tool_call / permission_decision for each call) → per call: effect_begin
(durable before execute, effectful classes only) → execute → effect_commit → tool_result → next
model_request → ... → turn_completed. Recovery (``threads.run.recovery``) is the same loop
started on a log whose tail is in doubt: it settles each in-doubt item first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from threads.errors import StoreError
from threads.log.reduce import Fold
from threads.log.render import MEDIA_TYPE, RenderCache, event_refs, render
from threads.models.protocol import (
    ModelCallError,
    ModelOutput,
    ModelRequest,
    TextDelta,
    ToolDefinition,
)
from threads.run import cancel
from threads.run.budget_check import BudgetGuard
from threads.run.calls import CallRunner
from threads.run.principal import Principal
from threads.run.recovery import Recovery
from threads.run.results import (
    Cancelled,
    Completed,
    ErrorInfo,
    Failed,
    Parked,
    Pending,
    RunResult,
)
from threads.store.protocol import PendingArtifact

if TYPE_CHECKING:
    from threads.run.agent import Agent
    from threads.run.budget import Budget
    from threads.run.permissions import Permissions
    from threads.run.streaming import RunStream
    from threads.run.thread import Thread
    from threads.run.writer import BranchWriter

HOST = {"kind": "host"}
MODEL = {"kind": "model"}
RECOVERY = {"kind": "recovery"}
MAX_RATE_LIMIT_RETRIES = 5
MAX_RETRY_AFTER_MS = 60_000
CRASH_RESENDS = 2  # resends of a request whose outcome is unknown, per model reply
IN_DOUBT_REASONS = ("crash", "server_error", "timeout", "stream_broken")
# How a run waits out a recorded retry delay when none is injected; looked up per run, so a test
# can monkeypatch it (runs started by ``Agent.run`` have no other way to take a sleep).
RETRY_SLEEP: Callable[[float], Awaitable[None]] = asyncio.sleep


class RunLoop:
    def __init__(
        self,
        agent: Agent,
        writer: BranchWriter,
        thread: Thread,
        *,
        deps: Any,
        principal: Principal,
        run_budget: Budget | None,
        sink: RunStream | None,
        dropped_ref: dict[str, Any] | None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        ceiling: Permissions | None = None,
    ) -> None:
        self.agent = agent
        self.ceiling = ceiling
        self.permissions = agent.permissions.narrowed(ceiling)
        self.writer = writer
        self.thread = thread
        self.principal = principal
        self.sink = sink
        self.dropped_ref = dropped_ref
        self.sleep = sleep if sleep is not None else RETRY_SLEEP
        self.calls = CallRunner(self, deps)
        self.budget = BudgetGuard(agent, run_budget)
        self.recovering = False
        self.cancel_wanted = False
        self._artifacts: dict[str, bytes] = {}
        self._artifacts_seen = 0
        self._render_cache = RenderCache()

    @property
    def fold(self) -> Fold:
        return self.writer.fold

    def now(self) -> int:
        return self.writer.store.clock.now_ms()

    def actor(self, kind: str = "host") -> dict[str, Any]:
        return RECOVERY if self.recovering else {"kind": kind}

    # ---- the run ---------------------------------------------------------------------------

    async def drive(self, input: str | None, *, recovering: bool) -> RunResult:
        cancel.register(self)
        try:
            await self._repair_torn_tail()
            if recovering:
                self.recovering = True
                stop = await Recovery(self).settle()
                self.recovering = False
                if stop is not None:
                    return stop
            await self.calls.release_approval_parks()  # expired, or cancelled
            if self.fold.parks:
                return self.parked()
            if self.fold.turn is not None:
                result = await self.run_turn()
                if input is None or not isinstance(result, Completed):
                    return result
            if input is None:
                return Completed(self.thread, self.last_text())
            exhausted = await self.budget.before_turn(self)
            if exhausted is not None:
                return exhausted
            data: dict[str, Any] = {"source": "api", "text": input}
            if self.budget.run_budget is not None:
                data["budget"] = self.budget.run_budget.to_wire()
            await self.writer.append(
                [("user_input", data, {"kind": "user", "principal": self.principal.to_wire()})]
            )
            return await self.run_turn()
        except StoreError as exc:
            if exc.code in ("stale_epoch", "seq_conflict", "branch_busy"):
                return Failed(self.thread, ErrorInfo(exc.code, exc.message))
            raise
        finally:
            cancel.unregister()

    async def honour_cancel_request(self) -> None:
        """Record a Ctrl-C (``run_sync``) as the durable ``cancel_requested`` barrier."""
        turn = self.fold.turn
        if self.cancel_wanted and turn is not None and turn.cancel_event is None:
            principal = {"kind": "user", "principal": self.principal.to_wire()}
            await self.writer.append(
                [
                    (
                        "cancel_requested",
                        {"reason": "interrupted (Ctrl-C)", "scope": "turn"},
                        principal,
                    )
                ]
            )

    async def _repair_torn_tail(self) -> None:
        """An import that dropped a torn final chunk records it on the first writable open."""
        if self.dropped_ref is None or any(e.type == "log_repaired" for e in self.fold.events):
            return
        at_offset = sum(len(e.line) + 1 for e in self.fold.events) + sum(
            len(h.line) + 1 for h in self.fold.segment_headers
        )
        data = {
            "at_offset": at_offset,
            "dropped_ref": self.dropped_ref,
            "truncated_bytes": self.dropped_ref["bytes"],
        }
        await self.writer.append([("log_repaired", data, HOST)])

    async def run_turn(self) -> RunResult:
        """Drive the open turn until it ends, parks, or runs out of budget."""
        while True:
            await self.honour_cancel_request()
            stop = await self.calls.run_pending()
            if stop is not None:
                return stop
            await self.honour_cancel_request()  # a Ctrl-C during a call: no further request
            turn = self.fold.turn
            if turn is None:
                return Completed(self.thread, self.last_text())
            if turn.cancel_event is not None:
                return await self.finish_cancelled()
            if self._answered():
                reason = "max_output" if self._last_stop() == "max_tokens" else "end_turn"
                await self.writer.append([("turn_completed", {"reason": reason}, HOST)])
                return Completed(self.thread, self.last_text())
            if await self._record_unrecorded_calls():
                continue
            outcome = await self.model_step()
            if outcome is not None:
                return outcome

    def _answered(self) -> bool:
        """The last transcript item is a model reply that asked for no tool."""
        transcript = self.fold.transcript
        if not transcript or transcript[-1][0] != "assistant":
            return False
        last = self.fold.responses[-1]
        return not any(part.get("type") == "tool_use" for part in last["content"])

    async def _record_unrecorded_calls(self) -> bool:
        """A reply whose tool calls were never recorded (a writer that records them one by one
        crashed in between): record the rest, in part order, before anything else."""
        if not self.fold.responses:
            return False
        last = self.fold.responses[-1]
        missing = [
            part
            for part in last["content"]
            if part.get("type") == "tool_use" and part["call_id"] not in self.fold.calls
        ]
        if not missing:
            return False
        await self.writer.append(self.calls.record_calls(missing, last["request_event_id"]))
        return True

    def _last_stop(self) -> str:
        return str(self.fold.responses[-1]["stop_reason"]) if self.fold.responses else "end_turn"

    def last_text(self) -> str:
        if not self.fold.responses:
            return ""
        return "".join(
            p.get("text", "") for p in self.fold.responses[-1]["content"] if p.get("type") == "text"
        )

    def parked(self) -> Parked:
        pending = [Pending(kind, ident) for kind, ident in self.fold.parks]
        reasons = {
            "approval": "awaiting_approval",
            "effect": "effect_unknown",
            "input": "awaiting_input",
        }
        first_kind = next(iter(self.fold.parks))[0]
        return Parked(self.thread, reasons.get(first_kind, "effect_unknown"), pending)

    async def finish_cancelled(self) -> Cancelled:
        turn = self.fold.turn
        assert turn is not None
        assert turn.cancel_event is not None
        await self.writer.append(
            [
                ("cancelled", {"request_event_id": turn.cancel_event.event_id}, HOST),
                ("turn_completed", {"reason": "cancelled"}, HOST),
            ]
        )
        return Cancelled(self.thread)

    async def fail_turn(self, code: str, message: str, reason: str = "error") -> Failed:
        data: dict[str, Any] = {"reason": reason}
        if reason == "error" and code in ("transport_fence_unsupported", "content_unsupported"):
            data["code"] = code
        if self.fold.turn is not None and self.fold.open_attempt is None:
            await self.writer.append([("turn_completed", data, HOST)])
        return Failed(self.thread, ErrorInfo(code, message))

    # ---- one model request ---------------------------------------------------------------

    def next_attempt(self) -> int:
        """1 for a fresh request; n + 1 when it resends the turn's last attempt, which was
        abandoned (rate limited, in doubt after a crash, ...)."""
        last = self.fold.last_attempt
        turn = self.fold.turn
        if last is None or turn is None or last.outcome in (None, "response"):
            return 1
        if last.event.seq < turn.input_event.seq:
            return 1
        return last.attempt + 1

    async def _render_artifacts(self) -> dict[str, bytes]:
        """The artifacts the next request's Render v1 reads or verifies (images, reasoning
        blocks, injected text); one the store lacks is left out, so render names its event."""
        for event in self.fold.events[self._artifacts_seen :]:
            for ref in event_refs(event):
                if ref["sha256"] in self._artifacts:
                    continue
                try:
                    self._artifacts[ref["sha256"]] = await self.writer.store.get_artifact(
                        ref["sha256"]
                    )
                except StoreError as exc:
                    if exc.code != "artifact_missing":
                        raise
        self._artifacts_seen = len(self.fold.events)
        return self._artifacts

    async def model_step(self) -> RunResult | None:
        in_doubt = self._retries(IN_DOUBT_REASONS)
        if in_doubt > CRASH_RESENDS:
            return await self.fail_turn(
                "model_error",
                f"the model request was left in doubt {in_doubt} times in a row (crashes,"
                " timeouts, 5xx or cut streams after sending); threads stops resending rather"
                " than pay for it again. Check the provider, then run the thread again.",
            )
        exhausted = await self.budget.before_request(self)
        if exhausted is not None:
            return exhausted
        started = self.fold.thread_started
        assert started is not None
        rendered = render(
            started, self.fold.events, await self._render_artifacts(), self._render_cache
        )
        attempt = self.next_attempt()
        [request_event] = await self.writer.append(
            [
                (
                    "model_request",
                    {
                        "attempt": attempt,
                        "declared_prefix": rendered.declared_prefix(),
                        "request_ref": rendered.request_ref(),
                    },
                    HOST,
                )
            ],
            artifacts=[PendingArtifact(rendered.data, MEDIA_TYPE)],
        )
        request = ModelRequest(
            request_key=f"{self.writer.branch_id}:{request_event.event_id}",
            system=started["instructions"],
            messages=rendered.messages,
            tools=[
                ToolDefinition(t["name"], t["description"], t["input_schema"])
                for t in self.fold.tools
            ],
            params=started["model_params"],
            attempt=attempt,
        )
        try:
            output = await self._call_model(request)
        except ModelCallError as exc:
            return await self.on_model_error(request_event.event_id, exc)
        await self.record_response(request_event.event_id, output, "model_response", MODEL)
        return None

    async def _call_model(self, request: ModelRequest) -> ModelOutput:
        output: ModelOutput | None = None
        try:
            async for item in self.agent.model.stream(request, self.writer):
                if isinstance(item, TextDelta):
                    if self.sink is not None:
                        self.sink.delta(item)
                else:
                    output = item
        except StoreError as exc:
            if exc.code == "stale_epoch":
                raise ModelCallError(
                    exc.message,
                    reason="provider_error",
                    provider_outcome="not_sent",
                    code="stale_epoch",
                ) from exc
            raise
        if output is None:
            raise ModelCallError(
                "the model ended its stream without a response",
                reason="stream_broken",
                provider_outcome="unknown",
                code="model_error",
            )
        return output

    async def record_response(
        self, request_event_id: str, output: ModelOutput, type_: str, actor: dict[str, Any]
    ) -> None:
        data: dict[str, Any] = {
            "completeness": "complete",
            "content": output.content,
            "request_event_id": request_event_id,
            "stop_reason": output.stop_reason,
            "usage": output.usage.to_wire(),
        }
        if type_ == "model_response_recovered":
            data["provider_request_id"] = output.provider_request_id or "unknown"
        items = [(type_, data, actor), *self.calls.record_calls(output.content, request_event_id)]
        await self.writer.append(items)

    async def on_model_error(self, request_event_id: str, exc: ModelCallError) -> RunResult | None:
        data: dict[str, Any] = {
            "provider_outcome": exc.provider_outcome,
            "reason": exc.reason,
            "request_event_id": request_event_id,
        }
        if exc.http_status is not None:
            data["http_status"] = exc.http_status
        if exc.retry_after_ms is not None:
            data["retry_after_ms"] = exc.retry_after_ms
        if exc.code == "stale_epoch":
            return Failed(self.thread, ErrorInfo("stale_epoch", exc.message))
        await self.writer.append([("model_attempt_abandoned", data, HOST)])
        if (
            exc.retryable
            and self._retries(("rate_limited", "overloaded")) <= MAX_RATE_LIMIT_RETRIES
        ):
            delay = min(exc.retry_after_ms or 1000, MAX_RETRY_AFTER_MS)
            basis = "retry_after" if exc.retry_after_ms is not None else "backoff"
            await self.writer.append(
                [
                    (
                        "retry_scheduled",
                        {
                            "basis": basis,
                            "delay_ms": delay,
                            "not_before": self.now() + delay,
                            "request_event_id": request_event_id,
                        },
                        HOST,
                    )
                ]
            )
            await self.sleep(delay / 1000)
            return None
        if exc.provider_outcome == "unknown" and exc.code is None:
            return None  # resent by the next model_step, which enforces CRASH_RESENDS
        if exc.code == "context_exhausted":
            return await self.fail_turn("context_exhausted", exc.message, "context_exhausted")
        if exc.code == "model_unavailable":
            return await self.fail_turn("model_unavailable", exc.message, "model_unavailable")
        return await self.fail_turn(exc.code or "model_error", exc.message)

    def _retries(self, reasons: tuple[str, ...]) -> int:
        """Abandoned attempts with one of ``reasons`` since the turn's last model reply."""
        count = 0
        for event in reversed(self.fold.events):
            if event.type in ("model_response", "model_response_recovered", "user_input"):
                break
            if event.type == "model_attempt_abandoned" and event.data["reason"] in reasons:
                count += 1
        return count
