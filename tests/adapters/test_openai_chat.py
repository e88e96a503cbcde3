"""The OpenAI adapter over Chat Completions, through the official SDK, against the fake."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from adapter_cases import (
    CANARY_KEY,
    AdapterContract,
    Build,
    assert_golden,
    collect,
    golden_body,
    golden_request,
    parallel_calls,
)

from threads.adapters.base import SdkModel
from threads.models.protocol import Usage
from threads.openai import openai
from threads.testing.fake_providers import OpenAIFake, ScriptedError, ScriptedTurn, ScriptedUsage


@pytest.fixture
def fake(openai_fake: OpenAIFake) -> OpenAIFake:
    return openai_fake


@pytest.fixture
def build(fake: OpenAIFake, models: list[SdkModel]) -> Build:
    def make(
        *, streaming: bool = True, base_url_override: str | None = None, **kw: Any
    ) -> SdkModel:
        model = openai(
            "gpt-test", api_key=CANARY_KEY, base_url=base_url_override or fake.base_url,
            context_window=128_000, max_output_tokens=1024, api="chat",
            streaming=streaming, **kw,
        )
        models.append(model)
        return model

    return make


class TestChatContract(AdapterContract):
    context_error = ScriptedError(
        400, "This model's maximum context length is 8192 tokens.",
        code="context_length_exceeded",
    )
    usage_case: ClassVar[tuple[ScriptedUsage, Usage]] = (
        ScriptedUsage(900, 40, cache_read_tokens=512, reasoning_tokens=8),
        Usage(input_tokens=900, output_tokens=40, cache_read_tokens=512, reasoning_tokens=8),
    )
    missing_fields = '{"object": "chat.completion.chunk", "choices": []}'


async def test_golden_request_body(fake: OpenAIFake, build: Build) -> None:
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    await collect(build(), golden_request())
    assert_golden("openai_chat", fake.requests[0].json())
    assert fake.requests[0].path == "/v1/chat/completions"


async def test_plain_call_has_no_stream_options(fake: OpenAIFake, build: Build) -> None:
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    await collect(build(streaming=False), golden_request())
    expected = {k: v for k, v in golden_body("openai_chat").items() if k != "stream_options"}
    assert fake.requests[0].json() == {**expected, "stream": False}


async def test_interleaved_fragments_of_parallel_calls_join_by_index(
    fake: OpenAIFake, build: Build
) -> None:
    """The fake interleaves the two calls' argument fragments round-robin."""
    fake.script(ScriptedTurn(tool_calls=parallel_calls()))
    _, output = await collect(build())
    assert [part["input"] for part in output.content] == [{"city": "Paris"}, {"city": "Oslo"}]


async def test_compatible_server_without_system_prompt(fake: OpenAIFake, build: Build) -> None:
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    await collect(build())
    assert fake.requests[0].json()["messages"] == [{"role": "user", "content": "Hi"}]
