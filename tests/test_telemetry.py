"""What a run tells the outside: INFO records under the ``threads`` logger when a run starts,
waits on a retry (and how long), parks and ends, DEBUG per committed event; OpenTelemetry spans
for the run, each model request and each tool call (read back through the SDK's in-memory
exporter); and ``import threads`` plus a whole run without opentelemetry installed."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from threads import (
    Completed,
    Event,
    Failed,
    FakeClock,
    Parked,
    Permissions,
    RunContext,
    agent,
    tool,
)
from threads.models.protocol import ModelCallError
from threads.store.protocol import Store
from threads.testing import call, rate_limited, say, scripted_model, use
from threads.testing.scripted import Fail

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    """One SDK provider for the process (OpenTelemetry allows setting it once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []

    waited_on_clock = FakeClock.sleep_ms

    async def recording(clock: FakeClock, ms: int) -> None:
        waits.append(ms / 1000)
        await waited_on_clock(clock, ms)

    monkeypatch.setattr(FakeClock, "sleep_ms", recording)  # a run waits on the store's clock
    return waits


@tool(effect="idempotent", dedup_window_ms=60_000)
async def charge_card(amount_cents: int, ctx: RunContext) -> str:
    """Charge the card."""
    return f"charged {amount_cents}"


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "threads" and r.levelno == level]


async def test_a_run_logs_its_start_its_retry_wait_and_its_end(
    store: Store, caplog: pytest.LogCaptureFixture, slept: list[float]
) -> None:
    caplog.set_level(logging.DEBUG, logger="threads")
    model = scripted_model([rate_limited(retry_after_ms=2500), say("hello")])
    result = await agent(name="greeter", model=model).run("hi", store=store)
    assert isinstance(result, Completed)
    assert slept == [2.5]
    info = _messages(caplog, logging.INFO)
    thread = result.thread.id
    assert info[0] == f"greeter starts thread {thread}"
    assert (
        f"thread {thread}: the model provider answered rate_limited; waiting 2.5 s before"
        " asking again"
    ) in info
    assert info[-1] == f"thread {thread} completed"
    debug = _messages(caplog, logging.DEBUG)
    events = await result.thread.timeline()
    assert debug == [f"thread {thread}: committed {e.seq} {e.type}" for e in events]


async def test_a_park_and_a_failure_say_what_they_wait_on_or_why(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="threads")
    script = [use(call("charge_card", amount_cents=5))]
    bot = agent(name="billing", model=scripted_model(script), tools=[charge_card],
                permissions=Permissions(ask=["charge_card"]))
    parked = await bot.run("charge", store=store)
    assert isinstance(parked, Parked)
    [pending] = parked.pending
    assert _messages(caplog, logging.INFO)[-1] == (
        f"thread {parked.thread.id} parked: awaiting_approval, waiting on approval {pending.id}"
    )
    broken = Fail(ModelCallError("no such model", reason="provider_error",
                                 provider_outcome="failed", code="model_unavailable"))
    failed = await agent(name="b", model=scripted_model([broken, say("x")])).run(
        "hi", store=store
    )
    assert isinstance(failed, Failed)
    assert _messages(caplog, logging.INFO)[-1] == (
        f"thread {failed.thread.id} failed: model_unavailable: no such model"
    )


def _by_name(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


async def test_spans_for_the_run_each_model_request_and_each_tool_call(
    store: Store, spans: InMemorySpanExporter
) -> None:
    model = scripted_model([use(call("charge_card", amount_cents=5)), say("done")])
    result = await agent(name="billing", model=model, tools=[charge_card]).run(
        "charge", store=store
    )
    assert isinstance(result, Completed)
    [run] = _by_name(spans, "threads.run")
    requests = _by_name(spans, "threads.model_request")
    [tool_call] = _by_name(spans, "threads.tool_call")
    assert run.attributes is not None
    assert dict(run.attributes) == {
        "threads.agent": "billing",
        "threads.thread_id": result.thread.id,
        "threads.branch_id": (await result.thread.state()).branch_id,
        "threads.outcome": "completed",
    }
    assert len(requests) == 2
    for span in [*requests, tool_call]:
        assert span.parent is not None
        assert span.parent.span_id == run.context.span_id
        assert span.attributes is not None
        assert span.attributes["threads.thread_id"] == result.thread.id
    assert [r.attributes["threads.outcome"] for r in requests if r.attributes] == [
        "response", "response",
    ]
    events = await result.thread.timeline()
    [called] = [e for e in events if e.type == "tool_call"]
    assert tool_call.attributes is not None
    assert dict(tool_call.attributes) == {
        "threads.thread_id": result.thread.id,
        "threads.tool": "charge_card",
        "threads.call_id": called.data["call_id"],
        "threads.effect_key": f"{called.branch_id}:{called.data['call_id']}",
        "threads.effect_class": "idempotent",
        "threads.attempt": 1,
        "threads.outcome": "ok",
    }


async def test_a_failed_step_is_an_error_span(
    store: Store, spans: InMemorySpanExporter, slept: list[float]
) -> None:
    @tool(effect="read_only")
    def explode() -> str:
        """Fails."""
        raise RuntimeError("disk on fire")

    model = scripted_model([rate_limited(0), use(call("explode")), say("sorry")])
    result = await agent(name="b", model=model, tools=[explode]).run("go", store=store)
    assert isinstance(result, Completed)
    first, *_ = _by_name(spans, "threads.model_request")
    assert first.attributes is not None
    assert first.attributes["threads.outcome"] == "rate_limited"
    assert first.status.status_code is StatusCode.ERROR
    [tool_call] = _by_name(spans, "threads.tool_call")
    assert tool_call.attributes is not None
    assert tool_call.attributes["threads.outcome"] == "error"
    assert tool_call.status.status_code is StatusCode.ERROR


async def test_the_stream_shows_a_retry_wait_as_it_is_committed(
    store: Store, slept: list[float]
) -> None:
    model = scripted_model([rate_limited(retry_after_ms=1200), say("hello")])
    async with agent(name="g", model=model).stream("hi", store=store) as s:
        seen = [item async for item in s if isinstance(item, Event)]
        assert isinstance(await s.result, Completed)
    [retry] = [e for e in seen if e.type == "retry_scheduled"]
    assert retry.data["delay_ms"] == 1200


def test_threads_runs_without_opentelemetry(tmp_path: Path) -> None:
    program = (
        "import asyncio, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import threads\n"
        "from threads.testing import say, scripted_model\n"
        "assert not threads.telemetry.TRACING\n"
        "async def main():\n"
        "    store = threads.sqlite(sys.argv[1])\n"
        "    bot = threads.agent(name='g', model=scripted_model([say('hi')]))\n"
        "    result = await bot.run('hello', store=store)\n"
        "    await store.close()\n"
        "    print(result.status)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "store")],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert done.stdout.strip() == "completed"


async def test_a_tool_that_raises_is_logged_with_its_traceback(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    @tool(effect="read_only")
    def explode() -> str:
        """Fails."""
        raise RuntimeError("disk on fire")

    caplog.set_level(logging.INFO, logger="threads")
    model = scripted_model([use(call("explode")), say("sorry")])
    result = await agent(name="b", model=model, tools=[explode]).run("go", store=store)
    assert isinstance(result, Completed)
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "explode" in record.getMessage()
    assert record.exc_info is not None
    assert "disk on fire" in str(record.exc_info[1])


async def test_taking_over_a_lease_its_holder_never_released_is_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="threads")
    bot = agent(name="greeter", model=scripted_model([say("one"), say("two"), say("three")]))
    first = await bot.run("hi", store=store)
    thread = first.thread.id
    again = await bot.run("again", store=store, thread=thread)  # the first run released it
    assert isinstance(again, Completed)
    assert not any("took its lease over" in m for m in _messages(caplog, logging.INFO))
    branch = (await store.root_branch(thread)).branch_id
    held = await store.acquire_lease(branch, "a-holder-that-dies", 1_000)  # never released
    assert isinstance(store.clock, FakeClock)
    store.clock.advance(2_000)  # its lease ran out: the next run takes the thread over
    taken = await bot.run("still there?", store=store, thread=thread)
    assert isinstance(taken, Completed)
    assert (
        f"thread {thread}: took its lease over from a holder that is gone (epoch"
        f" {held.epoch + 1})"
    ) in _messages(caplog, logging.INFO)


def test_no_span_is_made_until_the_application_sets_a_provider() -> None:
    """Without a provider every span would be the API's no-op: none is made. Once the
    application sets one (even after threads was imported), spans are real and recorded."""
    script = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from threads import telemetry
with telemetry.tool_span("t", "lookup", call_id="c", effect_key="k", effect_class="read_only",
                         attempt=1) as span:
    assert span is telemetry.NO_SPAN
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
with telemetry.tool_span("t", "lookup", call_id="c", effect_key="k", effect_class="read_only",
                         attempt=1) as span:
    telemetry.outcome(span, "ok")
(finished,) = exporter.get_finished_spans()
assert finished.name == "threads.tool_call" and finished.attributes["threads.outcome"] == "ok"
"""
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
