"""Dispatching one authorized call: make ``effect_begin`` durable (effectful classes), pass the
fence, run the tool, record its outcome. Returns ``Done`` (a ``tool_result`` was recorded) or
``InDoubt`` (an ``effect_unknown`` was recorded: the effect may or may not have happened).

A tool's exception is logged (logger ``threads``, with its traceback) as well as shown to the
model. While the tool runs, a cancel another process queues sets its ``ctx.cancelled``
(``watch_for_cancel``), as a Ctrl-C in this process does. Dispatch never settles: what to do
with an ``InDoubt`` call is the scheduler's next step (``threads.run.calls``), decided by
``threads.run.settle``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from threads import telemetry
from threads.log.fold import Call
from threads.log.vocabulary import (
    EffectUnknownDataReason,
    draft,
)
from threads.run.drafts import HOST, TOOL
from threads.run.queued_controls import watch_for_cancel
from threads.run.record import close, commit
from threads.run.runtime import Runtime
from threads.tools.encode import describe_exception, result_text
from threads.tools.tool import EffectUnknown, Tool

log = logging.getLogger("threads")


@dataclass(frozen=True, slots=True)
class Done:
    """The call's ``tool_result`` is recorded (it may be an error result)."""


@dataclass(frozen=True, slots=True)
class InDoubt:
    """``effect_unknown`` is recorded for the call, with this reason."""

    reason: str


async def dispatch(rt: Runtime, call: Call, tool: Tool) -> Done | InDoubt:
    """Run the tool now, once. Effectful classes make ``effect_begin`` durable first."""
    args = tool.input.model_validate(call.input)
    attempt = call.attempt + 1
    effectful = tool.effect != "read_only"
    if effectful:
        await rt.writer.append(
            [draft("effect_begin", {"attempt": attempt, "call_id": call.call_id}, HOST)]
        )
    await rt.writer.check()
    cancelled = rt.cancel.tool_started(tool.name)
    ctx = rt.tool_context(call, attempt, cancelled)
    watcher = asyncio.create_task(watch_for_cancel(rt, cancelled))
    in_doubt: EffectUnknownDataReason | None = None
    with telemetry.tool_span(
        rt.writer.thread_id,
        tool.name,
        call_id=call.call_id,
        effect_key=call.effect_key,
        effect_class=tool.effect,
        attempt=attempt,
    ) as span:
        try:
            value = await tool.execute(args, ctx)
        except EffectUnknown as exc:
            in_doubt = exc.reason
            text, is_error = f"error: {describe_exception(exc)}", True
            log.warning("tool %s (call %s): effect unknown", tool.name, call.call_id, exc_info=exc)
        except (TimeoutError, ConnectionError) as exc:
            in_doubt = "timeout" if isinstance(exc, TimeoutError) else "transport_error"
            text, is_error = f"error: {describe_exception(exc)}", True
            log.warning("tool %s (call %s): %s", tool.name, call.call_id, in_doubt, exc_info=exc)
        except Exception as exc:
            text, is_error = f"error: {describe_exception(exc)}", True
            log.error("tool %s (call %s) raised", tool.name, call.call_id, exc_info=exc)
        else:
            # Outside the try: once execute returned, the effect may have happened, so a value
            # that can't be encoded is still a success (result_text says so, and never raises).
            text, is_error = result_text(value), False
        finally:
            watcher.cancel()
            rt.cancel.tool_ended(cancelled)
        telemetry.outcome(span, _outcome(in_doubt, is_error), error=is_error)
    if effectful and in_doubt is not None:
        await rt.writer.append(
            [draft("effect_unknown", {"call_id": call.call_id, "reason": in_doubt}, HOST)]
        )
        return InDoubt(in_doubt)
    if effectful:
        # An idempotent call's commit rides with its result: a crash before that append
        # resends the call with the same effect_key inside its dedup window, which the class
        # allows. Any other class commits at once, keeping its in-doubt window to one commit.
        await commit(rt, call, text, hold=tool.effect == "idempotent")
    # The result rides with the next append (the next model_request): nothing is sent before
    # then, and the fence check before any send flushes it.
    await close(rt, call, text, origin="executed", is_error=is_error, actor=TOOL, hold=True)
    return Done()


def _outcome(in_doubt: str | None, is_error: bool) -> str:
    if in_doubt is not None:
        return f"in_doubt:{in_doubt}"
    return "error" if is_error else "ok"
