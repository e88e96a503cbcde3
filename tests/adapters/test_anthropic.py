"""The Anthropic adapter over the Messages API, through the official SDK, against the fake."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from adapter_cases import (
    CANARY_KEY,
    AdapterContract,
    Build,
    assert_golden,
    collect,
    failure,
    golden_body,
    golden_request,
)

from threads.adapters.base import SdkModel
from threads.anthropic import anthropic
from threads.models.protocol import ModelRequest, Usage
from threads.testing.fake_providers import (
    AnthropicFake,
    ScriptedError,
    ScriptedTurn,
    ScriptedUsage,
)


@pytest.fixture
def fake(anthropic_fake: AnthropicFake) -> AnthropicFake:
    return anthropic_fake


@pytest.fixture
def build(fake: AnthropicFake, models: list[SdkModel]) -> Build:
    def make(
        *, streaming: bool = True, base_url_override: str | None = None, **kw: Any
    ) -> SdkModel:
        model = anthropic(
            "claude-test", api_key=CANARY_KEY, base_url=base_url_override or fake.base_url,
            max_output_tokens=1024, streaming=streaming, **kw,
        )
        models.append(model)
        return model

    return make


class TestAnthropicContract(AdapterContract):
    context_error = ScriptedError(400, "prompt is too long: 210000 tokens > 200000 maximum")
    usage_case: ClassVar[tuple[ScriptedUsage, Usage]] = (
        ScriptedUsage(30, 12, cache_read_tokens=4000, cache_write_tokens=600),
        Usage(input_tokens=30, output_tokens=12, cache_read_tokens=4000,
              cache_write_tokens=600),
    )
    missing_fields = '{"type": "message_start", "message": {"role": "assistant"}}'


async def test_golden_request_body(fake: AnthropicFake, build: Build) -> None:
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    await collect(build(), golden_request())
    assert_golden("anthropic_messages", fake.requests[0].json())
    assert fake.requests[0].path == "/v1/messages"


async def test_plain_call_sends_the_same_body(fake: AnthropicFake, build: Build) -> None:
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    await collect(build(streaming=False), golden_request())
    assert fake.requests[0].json() == {**golden_body("anthropic_messages"), "stream": False}


@pytest.mark.parametrize(
    "stop", ["end_turn", "max_tokens", "stop_sequence", "refusal", "pause_turn"]
)
async def test_stop_reasons_pass_through(
    fake: AnthropicFake, build: Build, streaming: bool, stop: Any
) -> None:
    fake.script(ScriptedTurn(text_chunks=["x"], stop=stop))
    _, output = await collect(build(streaming=streaming))
    assert output.stop_reason == stop


async def test_parallel_tool_results_merge_into_one_user_message(
    fake: AnthropicFake, build: Build
) -> None:
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    request = ModelRequest(
        request_key="br:ev", system="", tools=[], params={},
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "both"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "call_id": "a", "name": "t", "input": {}},
                {"type": "tool_use", "call_id": "b", "name": "t", "input": {}},
            ]},
            {"role": "tool", "call_id": "a", "is_error": False,
             "content": [{"type": "text", "text": "A"}]},
            {"role": "tool", "call_id": "b", "is_error": True,
             "content": [{"type": "text", "text": "B failed"}]},
        ],
    )
    await collect(build(), request)
    last = fake.requests[0].json()["messages"][-1]
    assert last == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "is_error": False,
         "content": [{"type": "text", "text": "A"}]},
        {"type": "tool_result", "tool_use_id": "b", "is_error": True,
         "content": [{"type": "text", "text": "B failed"}]},
    ]}


async def test_overloaded_error_event_mid_stream(fake: AnthropicFake, build: Build) -> None:
    """Anthropic can report overload inside a 200 stream as an ``error`` event."""
    fake.script(ScriptedError(529, "Overloaded", error_type="overloaded_error", in_stream=True),
                ScriptedError(500, "Internal error", error_type="api_error", in_stream=True))
    model = build()
    overloaded = await failure(model)
    assert (overloaded.reason, overloaded.provider_outcome, overloaded.retryable) == (
        "overloaded", "failed", True)
    broken = await failure(model)
    assert (broken.reason, broken.provider_outcome) == ("server_error", "unknown")


def test_adapter_ref_and_defaults() -> None:
    model = anthropic("claude-test", api_key=CANARY_KEY, max_output_tokens=100,
                      base_url="https://user:pw@gateway.example.com:8443/anthropic?t=1")
    assert model.context_window == 200_000
    assert model.adapter_ref() == {
        "name": "anthropic", "version": "1",
        "settings": {"api": "messages"},  # no endpoint, no streaming: transport
    }
