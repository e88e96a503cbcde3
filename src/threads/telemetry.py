"""What a run tells the outside while it works: stdlib ``logging`` under the ``threads`` logger,
and OpenTelemetry spans when ``opentelemetry-api`` is installed (the ``threads[otel]`` extra).

The run calls these functions at its boundaries (a run, a model request, a tool call, a retry
wait, each committed event); nothing else in the package traces. Spans: ``threads.run`` >
``threads.model_request`` / ``threads.tool_call``, with the thread id, effect key, effect class
and outcome as ``threads.*`` attributes. Without opentelemetry they cost nothing, and
``import threads`` never needs it.

Invariant: telemetry only reports. It never changes what a run does, and it never carries what
the log keeps out of reach: no ``deps``, no keys, no tool arguments or results, no model text.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from threads.log.lines import Event
    from threads.models.protocol import Usage

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
def _span(name: str, attributes: dict[str, Attribute]) -> Iterator[Span]:
    """A span nested in the current one, ended with the block; an exception escaping the block
    is recorded on it (and re-raised)."""
    if not TRACING or isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider):
        yield NO_SPAN  # no provider is set: every span would be the API's no-op one
        return
    with _tracer().start_as_current_span(name, attributes=attributes) as current:
        yield current


@functools.cache
def _tracer() -> otel_trace.Tracer:
    """The package's tracer, made once (the API's proxy hands over to the provider's tracer
    once one is set)."""
    return otel_trace.get_tracer("threads")


def outcome(current: Span, value: str, *, error: bool = False) -> None:
    """How the spanned step ended (``threads.outcome``); an error also sets the span's status."""
    current.set_attribute("threads.outcome", value)
    if error and TRACING and isinstance(current, otel_trace.Span):
        current.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, value))


# ---- a run ---------------------------------------------------------------------------------


@contextlib.contextmanager
def run_span(agent: str) -> Iterator[Span]:
    with _span("threads.run", {"threads.agent": agent}) as current:
        yield current


def run_started(current: Span, agent: str, thread_id: str, branch_id: str, *, new: bool) -> None:
    current.set_attribute("threads.thread_id", thread_id)
    current.set_attribute("threads.branch_id", branch_id)
    how = "starts thread" if new else "continues thread"
    logger.info("%s %s %s", agent, how, thread_id, extra={"thread_id": thread_id})


def run_ended(current: Span, thread_id: str, status: str, detail: str) -> None:
    """One INFO line for every outcome: completed, parked (on what), failed (why), ..."""
    outcome(current, status, error=status == "failed")
    logger.info(
        "thread %s %s%s",
        thread_id,
        status,
        f": {detail}" if detail else "",
        extra={"thread_id": thread_id, "status": status},
    )


def retry_wait(thread_id: str, delay_ms: int, reason: str) -> None:
    logger.info(
        "thread %s: the model provider answered %s; waiting %.1f s before asking again",
        thread_id,
        reason,
        delay_ms / 1000,
        extra={"thread_id": thread_id, "delay_ms": delay_ms},
    )


def lease_taken_over(thread_id: str, epoch: int) -> None:
    logger.info(
        "thread %s: took its lease over from a holder that is gone (epoch %d)",
        thread_id,
        epoch,
        extra={"thread_id": thread_id, "epoch": epoch},
    )


def committed(thread_id: str, events: list[Event]) -> None:
    if logger.isEnabledFor(logging.DEBUG):
        for event in events:
            logger.debug(
                "thread %s: committed %d %s",
                thread_id,
                event.seq,
                event.type,
                extra={"thread_id": thread_id, "seq": event.seq, "event_type": event.type},
            )


# ---- a model request and a tool call -------------------------------------------------------


@contextlib.contextmanager
def model_span(
    thread_id: str, request_event_id: str, attempt: int, provider: str, model: str
) -> Iterator[Span]:
    attributes: dict[str, Attribute] = {
        "threads.thread_id": thread_id,
        "threads.request_event_id": request_event_id,
        "threads.attempt": attempt,
        "gen_ai.system": provider,
        "gen_ai.request.model": model,
    }
    with _span("threads.model_request", attributes) as current:
        yield current


def model_usage(current: Span, usage: Usage) -> None:
    if usage.input_tokens is not None:
        current.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    if usage.output_tokens is not None:
        current.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)


@contextlib.contextmanager
def tool_span(
    thread_id: str, tool: str, *, call_id: str, effect_key: str, effect_class: str, attempt: int
) -> Iterator[Span]:
    attributes: dict[str, Attribute] = {
        "threads.thread_id": thread_id,
        "threads.tool": tool,
        "threads.call_id": call_id,
        "threads.effect_key": effect_key,
        "threads.effect_class": effect_class,
        "threads.attempt": attempt,
    }
    with _span("threads.tool_call", attributes) as current:
        yield current
