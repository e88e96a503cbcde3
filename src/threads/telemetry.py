"""What a run tells the outside while it works: stdlib ``logging`` under the ``threads`` logger,
and OpenTelemetry spans when ``opentelemetry-api`` is installed (the ``threads[otel]`` extra).

The run calls these functions at its boundaries (run start and end, a model request, a tool
call, a retry wait, a lease takeover, each committed event); nothing else in the package logs or
traces. Spans: ``threads.run`` > ``threads.model_request`` / ``threads.tool_call``, with the
thread id, effect key, effect class and outcome as ``threads.*`` attributes. Without
opentelemetry they cost nothing and ``import threads`` does not need it.

Invariant: telemetry only reports. It never changes what a run does, and it never carries what
the log keeps out of reach: no ``deps``, no keys, no tool arguments or results, no model text.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from threads.log.lines import Event

logger = logging.getLogger("threads")

try:  # the API only: which SDK and exporter (if any) is the application's choice
    from opentelemetry import trace as otel_trace

    TRACING = True
except ImportError:  # the test that blocks the import runs this
    TRACING = False

Attribute = str | int | bool


class Span(Protocol):
    """The part of a span the run writes to (an OpenTelemetry span, or ``NO_SPAN``)."""

    def set_attribute(self, key: str, value: Attribute) -> None: ...


class _NoSpan:
    def set_attribute(self, key: str, value: Attribute) -> None:
        return None


NO_SPAN = _NoSpan()


@contextlib.contextmanager
def span(name: str, attributes: dict[str, Attribute]) -> Iterator[Span]:
    """A span named ``name`` (nested in the current one), ended when the block ends; an
    exception escaping the block is recorded on it and re-raised."""
    if not TRACING:
        yield NO_SPAN
        return
    tracer = otel_trace.get_tracer("threads")
    with tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


def outcome(current: Span, value: str, *, error: bool = False) -> None:
    """Record how the spanned step ended (``threads.outcome``); errors also set the status."""
    current.set_attribute("threads.outcome", value)
    if error and TRACING and hasattr(current, "set_status"):
        current.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, value))


# ---- the run's story, as log records ------------------------------------------------------


def run_started(agent: str, thread_id: str, *, new: bool) -> None:
    how = "starts a new thread" if new else "continues the thread"
    logger.info("run of %s %s %s", agent, how, thread_id, extra={"thread_id": thread_id})


def run_ended(thread_id: str, status: str, detail: str) -> None:
    """INFO for every outcome: completed, parked (on what), failed (its code), ..."""
    logger.info(
        "run of thread %s %s%s",
        thread_id,
        status,
        f": {detail}" if detail else "",
        extra={"thread_id": thread_id, "status": status},
    )


def retry_wait(thread_id: str, delay_ms: int, reason: str) -> None:
    logger.info(
        "thread %s: the model provider said %s; waiting %.1f s before asking again",
        thread_id,
        reason,
        delay_ms / 1000,
        extra={"thread_id": thread_id, "delay_ms": delay_ms},
    )


def lease_taken_over(thread_id: str, epoch: int) -> None:
    logger.info(
        "thread %s: took over from a holder that is gone (epoch %d)",
        thread_id,
        epoch,
        extra={"thread_id": thread_id, "epoch": epoch},
    )


def committed(thread_id: str, event: Event) -> None:
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "thread %s: committed %d %s",
            thread_id,
            event.seq,
            event.type,
            extra={"thread_id": thread_id, "seq": event.seq, "event_type": event.type},
        )
