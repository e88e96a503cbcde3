"""Recovery: what a run does first on a thread that already has a log.

Under the run's new epoch and with actor ``recovery`` it settles every in-doubt item the last
writer left: an open model request (ask the model's optional ``lookup``; otherwise record the
attempt abandoned, billed at its bound, and resend within bounds), pending calls (materialize,
settle by class, park, or close ``not_executed``), and an open turn (closed ``interrupted`` when
its input was already answered; continued when none of it was sent, or when the last reply
was paused or cut at max_tokens, which the loop continues; cancelled when a durable
cancel is waiting). There is no separate resume call: running the thread again does this.
"""

from __future__ import annotations

import contextlib

from threads.log.vocabulary import (
    ModelAttemptAbandonedData,
    data_of,
    draft,
)
from threads.models.protocol import ModelCallError, ModelOutput, ModelRequest, SupportsLookup
from threads.run.calls import run_pending
from threads.run.drafts import RECOVERY
from threads.run.model_call import record_response
from threads.run.results import RunResult
from threads.run.runtime import Runtime
from threads.run.settings_epoch import current_model
from threads.run.stops import CONTINUED
from threads.run.turn import answered, finish_cancelled, last_stop
from threads.sandbox.protocol import SandboxError


async def recover(rt: Runtime) -> RunResult | None:
    """Settle what the last writer left in doubt; the run's outcome when it must stop here."""
    await _pending_resources(rt)
    recovered = await _open_model_request(rt)
    stop = await run_pending(rt)
    if stop is not None:
        return stop
    return await _open_turn(rt, recovered=recovered)


async def _pending_resources(rt: Runtime) -> None:
    """The sandbox ledger rows a crash left ``pending``, settled by the branch's next owner
    even when this run never touches the sandbox (a kill mid-snapshot at a turn's end leaves
    one that no later step would look at), and the snapshots a crash took but never recorded
    (released: no fork can start from them). A provider that can't answer now is asked again
    by the next run, or when this one attaches."""
    if rt.sandbox is None:
        return
    recorded = {data_of(e, "snapshot")["snapshot_id"] for e in rt.fold.events
                if e.type == "snapshot"}
    with contextlib.suppress(SandboxError):
        await rt.sandbox.settle_pending(recorded)


async def _open_model_request(rt: Runtime) -> bool:
    """Settle an open model request; True when its response was recovered by lookup."""
    attempt = rt.fold.open_attempt
    if attempt is None:
        return False
    event = attempt.event
    model = current_model(rt) or rt.spec.model  # the one the open request went to
    request = ModelRequest(
        request_key=f"{rt.writer.branch_id}:{event.event_id}",
        system="",
        messages=[],
        tools=[],
        params={},
        attempt=attempt.attempt,
    )
    answer = None
    if isinstance(model, SupportsLookup):
        answer = await model.lookup(request, rt.writer)
    if answer is not None and answer.status == "found" and answer.final and answer.output:
        output = answer.output
        if answer.provider_request_id and not output.provider_request_id:
            output = ModelOutput(
                output.content, output.stop_reason, output.usage, answer.provider_request_id
            )
        try:
            await record_response(rt, event.event_id, output, "model_response_recovered", RECOVERY)
            return True
        except ModelCallError:
            pass  # a recovered reply with no faithful form: abandoned as unknown below
    data: ModelAttemptAbandonedData = {
        "provider_outcome": "unknown", "reason": "crash", "request_event_id": event.event_id,
    }
    if answer is not None and answer.status == "not_found" and answer.final:
        data["provider_outcome"] = "not_sent"
        data["billing"] = "not_billed"
    else:
        data["provider_outcome"] = "unknown"
        data["billing"] = "unknown"
    await rt.writer.append([draft("model_attempt_abandoned", data, RECOVERY)])
    return False


async def _open_turn(rt: Runtime, *, recovered: bool) -> RunResult | None:
    fold = rt.fold
    turn = fold.turn
    if turn is None or fold.parks:
        return None
    if turn.cancel_event is not None:
        return await finish_cancelled(rt)
    if recovered:
        # The answer was only just recovered: the turn goes on exactly as if the response had
        # arrived live (the loop closes it end_turn, or runs its calls).
        return None
    if fold.transcript and answered(fold) and last_stop(fold) not in CONTINUED:
        await rt.writer.append([draft("turn_completed", {"reason": "interrupted"}, RECOVERY)])
    return None
