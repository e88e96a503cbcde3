"""Running tool calls: record, validate, authorize, dispatch, and settle each one in call order.

A call that never started is checked again before it runs (cancel barrier, tool present at call
time and not removed, input valid, permission, approval). An effectful call's ``effect_begin`` is
durable before ``execute`` runs; its outcome is durable before the next step. A call left in
doubt (begun or unknown, by a crash, timeout or transport error) is settled by its effect class
(``threads.run.settle``) or parked for a person.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from threads.log.canonical import canonical
from threads.log.ids import uuid7
from threads.log.reduce import Call
from threads.run.principal import Principal
from threads.run.results import Parked, Pending, RunResult
from threads.run.settle import Settler
from threads.run.thread import may_decide, resumed_data
from threads.store.protocol import PendingArtifact
from threads.tools.tool import EffectUnknown, RunContext, Tool

if TYPE_CHECKING:
    from threads.run.loop import RunLoop

TOOL = {"kind": "tool"}
HOST = {"kind": "host"}
PREVIEW_CHARS = 512
INLINE_RESULT_BYTES = 64 * 1024
APPROVAL_TTL_MS = 24 * 60 * 60 * 1000
EXPIRED = "denied: the approval request expired (approval_expired)"


def result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return canonical(value).decode("utf-8")


def tool_result_data(
    call_id: str, text: str, *, origin: str, is_error: bool, ref: dict[str, Any] | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "call_id": call_id,
        "completeness": "complete",
        "is_error": is_error,
        "origin": origin,
        "preview": text[:PREVIEW_CHARS],
    }
    if len(text) > PREVIEW_CHARS:
        if ref is not None:
            data["ref"] = ref
        else:
            data["content"] = [{"type": "text", "text": text}]
    return data


class CallRunner:
    def __init__(self, loop: RunLoop, deps: Any) -> None:
        self.loop = loop
        self.deps = deps
        self.settler = Settler(self)
        self.in_flight: set[asyncio.Event] = set()

    @property
    def writer(self):  # type: ignore[no-untyped-def]
        return self.loop.writer

    # ---- recording --------------------------------------------------------------------------

    def record_calls(
        self, content: list[dict[str, Any]], request_event_id: str
    ) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """tool_call events for every tool_use part, each followed by what can be decided now:
        an error result (unknown tool, invalid input) or the permission decision."""
        items: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        for part in content:
            if part.get("type") != "tool_use":
                continue
            call_id, name, args = part["call_id"], part["name"], part["input"]
            items.append(
                (
                    "tool_call",
                    {
                        "call_id": call_id,
                        "input": args,
                        "name": name,
                        "request_event_id": request_event_id,
                    },
                    HOST,
                )
            )
            items.extend(self._admit(call_id, name, args))
        return items

    def _admit(
        self, call_id: str, name: str, args: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        tool = self.loop.agent.tool_named(name)
        if tool is None or self.loop.fold.tool_spec(name) is None:
            text = f"not executed: unknown tool {name}"
            return [
                (
                    "tool_result",
                    tool_result_data(call_id, text, origin="not_executed", is_error=True),
                    HOST,
                )
            ]
        try:
            tool.input.model_validate(args)
        except ValidationError as exc:
            text = f"invalid input for {name}: {_validation_summary(exc)}"
            return [
                (
                    "tool_result",
                    tool_result_data(call_id, text, origin="not_executed", is_error=True),
                    HOST,
                )
            ]
        decision = self.loop.permissions.decide(
            name, args, tool.effect, self.loop.fold.thread_rules
        )
        items = [("permission_decision", decision.to_wire(call_id), HOST)]
        if decision.decision == "deny":
            text = (
                f"denied: {decision.reason or 'not permitted by ' + (decision.rule_id or 'policy')}"
            )
            items.append(
                (
                    "tool_result",
                    tool_result_data(call_id, text, origin="denied", is_error=True),
                    HOST,
                )
            )
        elif decision.decision == "ask":
            from threads.log.hashing import value_hash

            now = self.loop.now()
            items.append(
                (
                    "approval_requested",
                    {
                        "args_hash": value_hash(args),
                        "call_id": call_id,
                        "challenge_id": uuid7(now),
                        "expires_at": now + APPROVAL_TTL_MS,
                    },
                    HOST,
                )
            )
        return items

    # ---- running pending calls --------------------------------------------------------------

    async def run_pending(self) -> RunResult | None:
        """Settle or run every pending call in call order; stop at the first park."""
        await self.release_approval_parks()
        parked: list[Pending] = []
        reason = "effect_unknown"
        for call in self.loop.fold.pending_calls():
            await self.loop.honour_cancel_request()
            if call.result is not None:
                continue
            if call.effect is not None:
                if await self.settler.settle(call):
                    parked.append(Pending("effect", call.effect_key))
                continue
            if parked:
                continue  # nothing new starts while something is parked
            outcome = await self.start(call)
            if outcome is not None:
                parked.append(outcome)
                reason = "awaiting_approval" if outcome.kind == "approval" else reason
        if parked:
            return Parked(self.loop.thread, reason, parked)
        return None

    async def release_approval_parks(self) -> None:
        """An approval park ends without a decision when the approval expired (the call counts
        as denied) or a cancel barrier follows it (the call is not executed)."""
        fold = self.loop.fold
        turn = fold.turn
        for (kind, challenge_id), address in list(fold.parks.items()):
            call = fold.approvals.get(challenge_id) if kind == "approval" else None
            if call is None or call.approval is None or call.approval.state != "open":
                continue
            items = [("resumed", resumed_data(fold, address), HOST)]
            if call.result is not None:
                pass  # already closed (expired at dispatch): only the park is left to end
            elif turn is not None and turn.cancel_event is not None:
                text = "not executed: cancelled"
                items.append(("tool_result", _error_result(call, text, "not_executed"), HOST))
            elif call.approval.expires_at <= self.loop.now():
                items.append(("tool_result", _error_result(call, EXPIRED, "denied"), HOST))
            else:
                continue
            await self.writer.append(items)

    async def start(self, call: Call) -> Pending | None:
        """A call that never began: check everything again, then dispatch it."""
        tool = self.loop.agent.tool_named(call.name)
        reason = self._never_runs(call, tool)
        if reason is not None or tool is None:
            text = f"not executed: {reason}"
            await self.close(call, text, origin="not_executed", actor=self.loop.actor())
            return None
        if call.decision is None:
            await self.writer.append(self._admit(call.call_id, call.name, call.input)[:1])
        return await self._authorized_dispatch(call, tool)

    def _never_runs(self, call: Call, tool: Tool | None) -> str | None:
        """Why a call that never began must not start now, if it must not: the cancel barrier,
        no such tool when it was called (or now), or a later tool set that dropped it."""
        turn = self.loop.fold.turn
        if turn is not None and turn.cancel_event is not None:
            return "cancelled"
        if call.spec is None:
            return f"unknown tool {call.name}"
        if call.removed:
            return f"{call.name} was removed from the tool set"
        if tool is None:
            return f"unknown tool {call.name}"
        return None

    def _refusal_at_dispatch(self, call: Call, tool: Tool) -> str | None:
        """Checked again right before a call runs, with what this run knows: the run's
        ceiling (re-supplied by the caller on every run), and that a grant came from one of
        the agent's approvers (else the thread's starter)."""
        ceiling = self.loop.ceiling
        if ceiling is not None:
            decided = ceiling.decide(call.name, call.input, tool.effect)
            if decided.decision == "deny":
                why = decided.reason or f"not permitted by {decided.rule_id or 'policy'}"
                return f"denied by the run's permission ceiling: {why}"
        approval = call.approval
        if approval is not None and approval.state == "granted":
            by = approval.decided_by
            if by is None or not may_decide(
                self.loop.fold, Principal.from_wire(by), self.loop.agent.approvers
            ):
                who = by.get("subject") if by is not None else "nobody"
                return f"denied: the grant by {who} is not accepted: not an approver of this agent"
        return None

    async def _authorized_dispatch(self, call: Call, tool: Tool) -> Pending | None:
        loop = self.loop
        refusal = self._refusal_at_dispatch(call, tool)
        if refusal is not None and (call.decision == "allow" or call.approval is not None):
            await self.close(call, refusal, origin="denied", actor=HOST)
            return None
        if call.decision == "allow":
            await self.dispatch(call, tool)
            return None
        approval = call.approval
        if call.decision == "ask" and approval is not None:
            if approval.state == "granted":
                await self.dispatch(call, tool)
                return None
            if approval.state == "denied":
                text = f"denied by approver: {approval.reason or 'no reason given'}"
                await self.close(call, text, origin="denied", actor=HOST)
                return None
            if approval.expires_at <= loop.now():
                await self.close(call, EXPIRED, origin="denied", actor=HOST)
                return None
            if ("approval", approval.challenge_id) not in loop.fold.parks:
                await self.writer.append(
                    [
                        (
                            "parked",
                            {
                                "address": {"id": approval.challenge_id, "kind": "approval"},
                                "expires_at": approval.expires_at,
                                "reason": "awaiting_approval",
                            },
                            loop.actor(),
                        )
                    ]
                )
            return Pending("approval", approval.challenge_id)
        return None

    def context(self, call: Call, attempt: int) -> RunContext:
        loop = self.loop
        return RunContext(
            deps=self.deps,
            thread_id=loop.writer.thread_id,
            branch_id=loop.writer.branch_id,
            principal=loop.principal,
            call_id=call.call_id,
            effect_key=call.effect_key,
            attempt=attempt,
            cancelled=asyncio.Event(),
        )

    async def dispatch(self, call: Call, tool: Tool) -> None:
        """Run the tool now. Effectful classes make ``effect_begin`` durable first."""
        args = tool.input.model_validate(call.input)
        attempt = call.attempt + 1
        effectful = tool.effect != "read_only"
        if effectful:
            await self.writer.append(
                [("effect_begin", {"attempt": attempt, "call_id": call.call_id}, HOST)]
            )
        await self.writer.check()
        ctx = self.context(call, attempt)
        if self.loop.cancel_wanted:
            ctx.cancelled.set()
        self.in_flight.add(ctx.cancelled)
        try:
            value = await tool.execute(args, ctx)
            text, is_error = result_text(value), False
        except EffectUnknown as exc:
            if not effectful:
                text, is_error = f"error: {exc}", True
            else:
                await self.writer.append(
                    [("effect_unknown", {"call_id": call.call_id, "reason": exc.reason}, HOST)]
                )
                await self.settler.settle(call)
                return
        except (TimeoutError, ConnectionError) as exc:
            if not effectful:
                text, is_error = f"error: {type(exc).__name__}: {exc}", True
            else:
                reason = "timeout" if isinstance(exc, TimeoutError) else "transport_error"
                await self.writer.append(
                    [("effect_unknown", {"call_id": call.call_id, "reason": reason}, HOST)]
                )
                await self.settler.settle(call)
                return
        except Exception as exc:
            text, is_error = f"error: {type(exc).__name__}: {exc}", True
        finally:
            self.in_flight.discard(ctx.cancelled)
        if effectful:
            await self.commit(call, text)
        # The result rides with the next append (the next model_request): nothing is sent
        # before then, and the fence check before any send flushes it.
        await self.close(call, text, origin="executed", is_error=is_error, actor=TOOL, hold=True)

    async def commit(self, call: Call, text: str) -> None:
        data = text.encode("utf-8")
        from threads.store.rows import artifact_ref

        ref = artifact_ref(data, "text/plain")
        await self.writer.append(
            [("effect_commit", {"call_id": call.call_id, "result_ref": ref}, HOST)],
            artifacts=[PendingArtifact(data, "text/plain")],
        )

    async def close(
        self,
        call: Call,
        text: str,
        *,
        origin: str,
        actor: dict[str, Any],
        is_error: bool | None = None,
        hold: bool = False,
    ) -> None:
        error = (
            is_error
            if is_error is not None
            else origin not in ("executed", "materialized_from_commit")
        )
        artifacts: list[PendingArtifact] = []
        ref = None
        if len(text.encode("utf-8")) > INLINE_RESULT_BYTES:
            from threads.store.rows import artifact_ref

            blob = text.encode("utf-8")
            ref = artifact_ref(blob, "text/plain")
            artifacts.append(PendingArtifact(blob, "text/plain"))
        await self.writer.append(
            [
                (
                    "tool_result",
                    tool_result_data(call.call_id, text, origin=origin, is_error=error, ref=ref),
                    actor,
                )
            ],
            artifacts=artifacts,
            hold=hold,
        )


def _error_result(call: Call, text: str, origin: str) -> dict[str, Any]:
    return tool_result_data(call.call_id, text, origin=origin, is_error=True)


def _validation_summary(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "input"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
