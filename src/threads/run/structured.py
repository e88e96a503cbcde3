"""Structured output: ``agent(output=Model)`` ends a turn only on a valid ``final_output``.

The agent pins the model's JSON schema (``policy.output``, mode ``tool``) and a ``final_output``
tool whose input is that schema. Its calls are never executed: in call order each candidate is
checked against the pinned schema (``threads.log.output_eval``, the evaluator the reader applies)
and recorded ``output_validated``: ``accepted`` with the value (the result previews it as
canonical JSON, and the turn ends ``end_turn`` once the reply's calls are done, with
``Completed.output`` the validated model), or ``rejected`` with the errors, shown to the model
as an error result so it tries again. A turn that ends in plain text instead gets a trusted
instruction to call ``final_output`` and is asked again. The ``output_retries``-th failed
candidate (the first when it is 0) ends the turn ``output_invalid``: the model is never asked
once more. Everything is read from the pinned policy, so a
resumed run judges candidates exactly as the first did.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from threads.log.canonical import canonical
from threads.log.fold import Call, Fold
from threads.log.lines import (
    Event,
)
from threads.log.vocabulary import (
    InjectedData,
    OutputValidatedData,
    PolicyOutput,
    data_of,
    draft,
)
from threads.run.drafts import HOST, TOOL, tool_result_data
from threads.run.output_schema import ASK_ORIGIN, ASK_TEXT, pinned_output, pointer, schema_errors
from threads.run.results import Completed, ErrorInfo, Failed, RunResult
from threads.run.runtime import Runtime
from threads.run.snapshots import snapshot_turn
from threads.run.turn import fail_turn, last_text


async def judge(rt: Runtime, call: Call) -> None:
    """Record the candidate's ``output_validated`` and the call's result."""
    output = pinned_output(rt.fold)
    assert output is not None
    errors = schema_errors(output["schema"], call.input)
    if not errors and rt.spec.output is not None:
        try:
            rt.spec.output.model_validate(call.input)
        except ValidationError as exc:
            errors = [{"message": e["msg"], "path": pointer(e["loc"])} for e in exc.errors()]
    checked: OutputValidatedData = {
        "outcome": "rejected" if errors else "accepted",
        "schema_sha256": output["schema_sha256"],
        "source_event_id": call.event_id,
    }
    if errors:
        checked["errors"] = errors
        text = "invalid final_output: " + "; ".join(f"{e['path']}: {e['message']}" for e in errors)
        result = draft("tool_result", tool_result_data(
            call.call_id, text, origin="not_executed", is_error=True), HOST)
    else:
        checked["value"] = call.input
        result = draft("tool_result", tool_result_data(
            call.call_id, canonical(call.input).decode("utf-8"), origin="executed",
            is_error=False), TOOL)
    await rt.writer.append([draft("output_validated", checked, HOST), result])


async def after_calls(rt: Runtime) -> RunResult | None:
    """Once the reply's calls are done: end the turn on an accepted candidate, or
    ``output_invalid`` when the candidates ran out; None to go on."""
    fold = rt.fold
    output = pinned_output(fold)
    if output is None or fold.turn is None:
        return None
    if _accepted_in_turn(fold):
        await rt.writer.append([draft("turn_completed", {"reason": "end_turn"}, HOST)])
        await snapshot_turn(rt)
        return Completed(rt.thread, typed_output(rt))
    if _failures_in_turn(fold) >= failure_limit(output):
        return await fail_turn(rt, "output_invalid", _gave_up(output), "output_invalid")
    return None


async def ask_for_output(rt: Runtime) -> RunResult | None:
    """A turn that would end in plain text while an output is pinned: ask again (None), or end
    it ``output_invalid`` when the candidates ran out."""
    output = pinned_output(rt.fold)
    assert output is not None
    data: InjectedData = {"origin": {"id": ASK_ORIGIN}, "source": "recovery", "text": ASK_TEXT,
                          "trust": "trusted_instruction"}
    if _failures_in_turn(rt.fold) + 1 < failure_limit(output):
        await rt.writer.append([draft("injected", data, HOST)])
        return None
    # the ask is the turn's last failed candidate: its batch also ends the turn
    await rt.writer.append([draft("injected", data, HOST),
                            draft("turn_completed", {"reason": "output_invalid"}, HOST)])
    return Failed(rt.thread, ErrorInfo("output_invalid", _gave_up(output)))


def failure_limit(output: PolicyOutput) -> int:
    """How many failed candidates (rejected ``final_output`` calls plus asks after a plain-text
    ending) a turn may have; the one that reaches it ends the turn ``output_invalid``. The
    digest's exact bound: ``max_retries``, where 0 behaves as 1 (the first failure ends it)."""
    return max(1, int(output["max_retries"]))


def _gave_up(output: PolicyOutput) -> str:
    return f"the model gave no valid final_output in {failure_limit(output)} tries"


def typed_output(rt: Runtime) -> Any:
    """The turn's output: the accepted value (as the agent's output model when it has one),
    else the last reply's text."""
    value = rt.fold.features.accepted_output
    if value is None or pinned_output(rt.fold) is None:
        return last_text(rt.fold)
    if rt.spec.output is None:
        return value
    try:
        return rt.spec.output.model_validate(value)
    except ValidationError:  # accepted by an earlier run under another output model
        return value


def _accepted_in_turn(fold: Fold) -> bool:
    turn = fold.turn
    return turn is not None and fold.features.accepted_seq > turn.input_event.seq


def _failures_in_turn(fold: Fold) -> int:
    turn = fold.turn
    assert turn is not None
    count = 0
    for event in reversed(fold.events):
        if event.seq <= turn.input_event.seq:
            break
        count += _failed_candidate(event)
    return count


def _failed_candidate(event: Event) -> bool:
    """A rejected final_output, or the ask that followed a plain-text ending."""
    if event.type == "output_validated":
        return data_of(event, "output_validated")["outcome"] == "rejected"
    if event.type != "injected":
        return False
    data = data_of(event, "injected")
    return data["source"] == "recovery" and data["origin"]["id"] == ASK_ORIGIN
