"""The OpenAI adapter over the Responses API, through the official SDK, against the fake."""

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
)

from threads.adapters.base import SdkModel
from threads.models.protocol import Model, Usage
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
            context_window=128_000, max_output_tokens=1024, api="responses",
            streaming=streaming, **kw,
        )
        models.append(model)
        return model

    return make


class TestResponsesContract(AdapterContract):
    context_error = ScriptedError(
        400, "Your input exceeds the context window of this model.",
        code="context_length_exceeded",
    )
    usage_case: ClassVar[tuple[ScriptedUsage, Usage]] = (
        ScriptedUsage(1200, 80, cache_read_tokens=1024, reasoning_tokens=16),
        Usage(input_tokens=1200, output_tokens=80, cache_read_tokens=1024, reasoning_tokens=16),
    )
    missing_fields = '{"type": "response.completed", "response": {"status": "completed"}}'


async def test_golden_request_body(fake: OpenAIFake, build: Build) -> None:
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    await collect(build(), golden_request())
    assert_golden("openai_responses", fake.requests[0].json())
    assert fake.requests[0].path == "/v1/responses"


async def test_plain_call_sends_stream_false(fake: OpenAIFake, build: Build) -> None:
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    await collect(build(streaming=False), golden_request())
    body = fake.requests[0].json()
    assert body == {**golden_body("openai_responses"), "stream": False}


async def test_refusal_is_an_incomplete_content_filter(fake: OpenAIFake, build: Build) -> None:
    fake.script(ScriptedTurn(text_chunks=["no"], stop="refusal"))
    _, output = await collect(build())
    assert output.stop_reason == "refusal"


def test_adapter_ref_and_params() -> None:
    model = openai("gpt-test", api_key=CANARY_KEY, context_window=1000, max_output_tokens=10,
                   params={"temperature": 0.5}, streaming=False)
    assert model.adapter_ref() == {
        "name": "openai", "version": "1",
        "settings": {"api": "responses"},  # no endpoint, no streaming: transport
    }
    assert model.params() == {"temperature": 0.5, "max_tokens": 10}
    assert isinstance(model, Model)
    assert repr(model) == (
        "OpenAIModel(name='gpt-test', api='responses', endpoint='api.openai.com', streaming=False)"
    )
    assert (model.provider, model.name, model.context_window, model.max_output_tokens) == (
        "openai", "gpt-test", 1000, 10)

