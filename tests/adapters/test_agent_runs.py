"""Agents with tools run end to end through each real adapter against its fake provider, on a
real SQLite store: the event sequence, recorded usage, what the provider was sent, live deltas,
and how provider failures are recorded (retries, resends, coded failures)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from adapter_cases import CANARY_KEY
from pydantic import BaseModel

from threads import (
    Completed,
    Failed,
    FakeClock,
    RetryPolicy,
    RunContext,
    TextDelta,
    agent,
    sqlite,
    tool,
)
from threads.adapters.base import SdkModel
from threads.anthropic import anthropic
from threads.log.lines import Event
from threads.openai import openai
from threads.run.agent import Agent
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_providers import (
    AnthropicFake,
    FakeProvider,
    OpenAIFake,
    ScriptedError,
    ScriptedMalformed,
    ScriptedToolCall,
    ScriptedTurn,
    ScriptedUsage,
)


@dataclass(frozen=True)
class Provider:
    """One adapter under test: its fake, how to build it, how to read what it was sent."""

    fake: type[FakeProvider]
    build: Callable[[str, bool], SdkModel]
    tool_results: Callable[[dict[str, Any]], dict[str, str]]
    usage_fields: tuple[str, ...]  # the optional usage counts this provider reports
    context_error: ScriptedError


def _responses_results(body: dict[str, Any]) -> dict[str, str]:
    return {item["call_id"]: item["output"] for item in body["input"]
            if item.get("type") == "function_call_output"}


def _chat_results(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def _anthropic_results(body: dict[str, Any]) -> dict[str, str]:
    return {
        block["tool_use_id"]: "".join(part["text"] for part in block["content"])
        for message in body["messages"] for block in message["content"]
        if block.get("type") == "tool_result"
    }


def _openai(api: Any) -> Callable[[str, bool], SdkModel]:
    def make(url: str, streaming: bool) -> SdkModel:
        return openai("gpt-test", api_key=CANARY_KEY, base_url=url, context_window=128_000,
                      max_output_tokens=1024, api=api, streaming=streaming)
    return make


def _anthropic(url: str, streaming: bool) -> SdkModel:
    return anthropic("claude-test", api_key=CANARY_KEY, base_url=url, max_output_tokens=1024,
                     streaming=streaming)


OPENAI_CONTEXT = ScriptedError(400, "Your input exceeds the context window.",
                               code="context_length_exceeded")
PROVIDERS = {
    "openai-responses": Provider(OpenAIFake, _openai("responses"), _responses_results,
                                 ("cache_read_tokens", "reasoning_tokens"), OPENAI_CONTEXT),
    "openai-chat": Provider(OpenAIFake, _openai("chat"), _chat_results,
                            ("cache_read_tokens", "reasoning_tokens"), OPENAI_CONTEXT),
    "anthropic": Provider(AnthropicFake, _anthropic, _anthropic_results,
                          ("cache_read_tokens", "cache_write_tokens"),
                          ScriptedError(400, "prompt is too long: 210000 tokens > 200000")),
}


class Account(BaseModel):
    account: str


class Note(BaseModel):
    to: str
    text: str


@dataclass
class Setup:
    provider: Provider
    fake: FakeProvider
    bot: Agent
    store: SQLiteStore
    applied: list[str]
    slept: list[float]


@pytest.fixture(params=list(PROVIDERS))
async def setup(
    request: pytest.FixtureRequest, streaming: bool, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Setup]:
    provider = PROVIDERS[request.param]
    slept: list[float] = []

    waited_on_clock = FakeClock.sleep_ms

    async def recording(clock: FakeClock, ms: int) -> None:
        slept.append(ms / 1000)
        await waited_on_clock(clock, ms)

    monkeypatch.setattr(FakeClock, "sleep_ms", recording)  # a run waits on the store's clock
    applied: list[str] = []

    async def look_up(args: Account, ctx: RunContext) -> str:
        applied.append(f"look_up:{args.account}")
        return f"account {args.account} is open"

    async def send_note(args: Note, ctx: RunContext) -> str:
        applied.append(f"send_note:{ctx.effect_key}")
        return f"note sent to {args.to}"

    tools = [
        tool(name="look_up", description="Look up an account.", input=Account, execute=look_up,
             effect="read_only"),
        tool(name="send_note", description="Send a note.", input=Note, execute=send_note),
    ]
    async with provider.fake() as fake:
        model = provider.build(fake.base_url, streaming)
        store = sqlite(tmp_path / "store", clock=FakeClock())
        try:
            bot = agent(name="support", model=model, instructions="Help.", tools=tools)
            yield Setup(provider, fake, bot, store, applied, slept)
        finally:
            await store.close()
            await model.aclose()


def usage(n: int) -> ScriptedUsage:
    return ScriptedUsage(100 * n, 10 * n, cache_read_tokens=n, cache_write_tokens=2 * n,
                         reasoning_tokens=3 * n)


def expected_usage(provider: Provider, scripted: ScriptedUsage) -> dict[str, int]:
    wire = {"input_tokens": scripted.input_tokens, "output_tokens": scripted.output_tokens}
    return wire | {name: getattr(scripted, name) for name in provider.usage_fields}


def three_steps() -> list[ScriptedTurn]:
    """Parallel read_only + effectful calls, then one more lookup, then the answer."""
    return [
        ScriptedTurn(
            text_chunks=["Checking ", "first."],
            tool_calls=[
                ScriptedToolCall("call_1", "look_up", ['{"acc', 'ount": "a1"}']),
                ScriptedToolCall("call_2", "send_note", ['{"to": "bob",', ' "text": "hi"}']),
            ],
            usage=usage(1), response_id="r1",
        ),
        ScriptedTurn(tool_calls=[ScriptedToolCall("call_3", "look_up", ['{"account": "a2"}'])],
                     usage=usage(2), response_id="r2"),
        ScriptedTurn(text_chunks=["All ", "done."], usage=usage(3), response_id="r3"),
    ]


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def of_type(events: list[Event], type_: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == type_]


async def test_multi_step_run_with_parallel_calls(setup: Setup, streaming: bool) -> None:
    setup.fake.script(*three_steps())
    seen: list[Event | TextDelta] = []
    async with setup.bot.stream("Fix account a1", store=setup.store) as live:
        seen.extend([item async for item in live])
        result = await live.result
    assert isinstance(result, Completed), result
    assert result.output == "All done."
    events = await result.thread.timeline()
    call = ["tool_call", "permission_decision"]
    assert types(events) == [
        "thread_started", "user_input",
        "model_request", "model_response", *call, *call,
        "tool_result", "effect_begin", "effect_commit", "tool_result",
        "model_request", "model_response", *call, "tool_result",
        "model_request", "model_response", "turn_completed",
    ]
    # usage recorded is what the fake sent
    assert [r["usage"] for r in of_type(events, "model_response")] == [
        expected_usage(setup.provider, usage(n)) for n in (1, 2, 3)
    ]
    # each follow-up request carried the results of the calls before it
    bodies = [r.json() for r in setup.fake.requests]
    assert len(bodies) == 3
    assert setup.provider.tool_results(bodies[1]) == {
        "call_1": "account a1 is open", "call_2": "note sent to bob"}
    assert setup.provider.tool_results(bodies[2]) == {
        "call_1": "account a1 is open", "call_2": "note sent to bob",
        "call_3": "account a2 is open"}
    assert [a.split(":")[0] for a in setup.applied] == ["look_up", "send_note", "look_up"]
    # deltas were shown live, never recorded: the stream's events are exactly the log
    deltas = [item.text for item in seen if isinstance(item, TextDelta)]
    assert deltas == (["Checking ", "first.", "All ", "done."] if streaming else [])
    assert [item for item in seen if isinstance(item, Event)] == events
    texts = [p["text"] for r in of_type(events, "model_response") for p in r["content"]
             if p["type"] == "text"]
    assert texts == ["Checking first.", "All done."]


async def test_rate_limit_is_recorded_and_waited_out(setup: Setup) -> None:
    setup.fake.script(ScriptedError(429, "slow down", headers={"retry-after": "2"}),
                      ScriptedTurn(text_chunks=["ok"]))
    result = await setup.bot.run("hi", store=setup.store)
    assert isinstance(result, Completed), result
    events = await result.thread.timeline()
    assert types(events)[2:] == [
        "model_request", "model_attempt_abandoned", "retry_scheduled",
        "model_request", "model_response", "turn_completed",
    ]
    [abandoned] = of_type(events, "model_attempt_abandoned")
    assert (abandoned["reason"], abandoned["provider_outcome"], abandoned["http_status"],
            abandoned["retry_after_ms"]) == ("rate_limited", "failed", 429, 2000)
    [retry] = of_type(events, "retry_scheduled")
    assert (retry["basis"], retry["delay_ms"]) == ("retry_after", 2000)
    assert setup.slept == [2.0]
    assert [r["attempt"] for r in of_type(events, "model_request")] == [1, 2]


async def test_server_error_is_in_doubt_and_resent(setup: Setup) -> None:
    setup.fake.script(ScriptedError(500, "boom"), ScriptedTurn(text_chunks=["ok"]))
    result = await setup.bot.run("hi", store=setup.store)
    assert isinstance(result, Completed), result
    events = await result.thread.timeline()
    [abandoned] = of_type(events, "model_attempt_abandoned")
    assert (abandoned["reason"], abandoned["provider_outcome"]) == ("server_error", "unknown")
    assert [r["attempt"] for r in of_type(events, "model_request")] == [1, 2]
    assert setup.slept == []


async def test_server_errors_are_resent_only_within_bounds(setup: Setup) -> None:
    setup.fake.script(*[ScriptedError(500, "boom")] * 3, ScriptedTurn(text_chunks=["never"]))
    result = await setup.bot.run("hi", store=setup.store)
    assert isinstance(result, Failed), result
    assert result.error.code == "model_error"
    assert len(setup.fake.requests) == RetryPolicy().crash_resends + 1
    events = await result.thread.timeline()
    assert of_type(events, "turn_completed") == [{"reason": "error"}]
    assert of_type(events, "model_response") == []


async def test_context_length_fails_context_exhausted(setup: Setup) -> None:
    setup.fake.script(setup.provider.context_error)
    result = await setup.bot.run("hi", store=setup.store)
    assert isinstance(result, Failed), result
    assert result.error.code == "context_exhausted"
    events = await result.thread.timeline()
    assert of_type(events, "turn_completed") == [{"reason": "context_exhausted"}]


async def test_bad_credentials_fail_model_unavailable(setup: Setup) -> None:
    setup.fake.script(ScriptedError(401, "invalid x-api-key"))
    result = await setup.bot.run("hi", store=setup.store)
    assert isinstance(result, Failed), result
    assert result.error.code == "model_unavailable"
    assert "API key" in result.error.message
    events = await result.thread.timeline()
    assert of_type(events, "turn_completed") == [{"reason": "model_unavailable"}]


async def test_malformed_reply_is_a_coded_failure_with_nothing_half_recorded(
    setup: Setup,
) -> None:
    setup.fake.script(ScriptedMalformed())
    result = await setup.bot.run("hi", store=setup.store)
    assert isinstance(result, Failed), result
    assert result.error.code == "model_error"
    events = await result.thread.timeline()
    assert types(events)[2:] == ["model_request", "model_attempt_abandoned", "turn_completed"]
    [abandoned] = of_type(events, "model_attempt_abandoned")
    assert abandoned["provider_outcome"] == "unknown"
    assert setup.applied == []
