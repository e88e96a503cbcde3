"""Recovery: what a run does first on a thread that already has a log.

Under the run's new epoch and with actor ``recovery`` it settles every in-doubt item the last
writer left: an open model request (ask the model's optional ``lookup``; otherwise record the
attempt abandoned, billed at its bound, and resend within bounds), pending calls (materialize,
settle by class, park, or close ``not_executed``), and an open turn (closed ``interrupted`` when
its input was already answered; continued when none of it was sent; cancelled when a durable
cancel is waiting). There is no separate resume call: running the thread again does this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threads.models.protocol import ModelCallError, ModelRequest, SupportsLookup
from threads.run.results import RunResult

if TYPE_CHECKING:
    from threads.run.loop import RunLoop

RECOVERY = {"kind": "recovery"}


class Recovery:
    def __init__(self, loop: RunLoop) -> None:
        self.loop = loop

    async def settle(self) -> RunResult | None:
        recovered = await self._open_model_request()
        stop = await self.loop.calls.run_pending()
        if stop is not None:
            return stop
        return await self._open_turn(recovered=recovered)

    async def _open_model_request(self) -> bool:
        """Settle an open model request; True when its response was recovered by lookup."""
        loop = self.loop
        attempt = loop.fold.open_attempt
        if attempt is None:
            return False
        event = attempt.event
        model = loop.agent.model
        request = ModelRequest(
            request_key=f"{loop.writer.branch_id}:{event.event_id}",
            system="",
            messages=[],
            tools=[],
            params={},
            attempt=attempt.attempt,
        )
        answer = None
        if isinstance(model, SupportsLookup):
            answer = await model.lookup(request, loop.writer)
        if answer is not None and answer.status == "found" and answer.final and answer.output:
            output = answer.output
            if answer.provider_request_id and not output.provider_request_id:
                output = type(output)(
                    output.content, output.stop_reason, output.usage, answer.provider_request_id
                )
            try:
                await loop.record_response(
                    event.event_id, output, "model_response_recovered", RECOVERY
                )
                return True
            except ModelCallError:
                pass  # a recovered reply with no faithful form: abandoned as unknown below
        data: dict[str, Any] = {"reason": "crash", "request_event_id": event.event_id}
        if answer is not None and answer.status == "not_found" and answer.final:
            data["provider_outcome"] = "not_sent"
            data["billing"] = "not_billed"
        else:
            data["provider_outcome"] = "unknown"
            data["billing"] = "unknown"
        await loop.writer.append([("model_attempt_abandoned", data, RECOVERY)])
        return False

    async def _open_turn(self, *, recovered: bool = False) -> RunResult | None:
        loop = self.loop
        fold = loop.fold
        turn = fold.turn
        if turn is None or fold.parks:
            return None
        if turn.cancel_event is not None:
            return await loop.finish_cancelled()
        if recovered:
            # The answer was only just recovered: the turn goes on exactly as if the response
            # had arrived live (the loop closes it end_turn, or runs its calls).
            return None
        last_role = fold.transcript[-1][0] if fold.transcript else None
        if last_role == "assistant" and loop._answered():
            await loop.writer.append([("turn_completed", {"reason": "interrupted"}, RECOVERY)])
        return None
