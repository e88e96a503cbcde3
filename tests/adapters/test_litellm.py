"""LiteLLM routes: ``openai/...`` is served (fenced) by our OpenAI adapter without importing
litellm; every other prefix is refused at setup with ``transport_fence_unsupported``."""

from __future__ import annotations

import sys

import pytest
from adapter_cases import CANARY_KEY, collect

from threads.adapters.base import SdkModel
from threads.errors import ConfigError
from threads.litellm import litellm
from threads.testing.fake_providers import OpenAIFake, ScriptedTurn


async def test_openai_route_goes_through_our_adapter(
    openai_fake: OpenAIFake, models: list[SdkModel]
) -> None:
    openai_fake.script(ScriptedTurn(text_chunks=["via ", "fence"]))
    model = litellm("openai/qwen2.5", api_key=CANARY_KEY, api_base=openai_fake.base_url,
                    context_window=32_000, max_output_tokens=256)
    models.append(model)
    deltas, output = await collect(model)
    assert deltas == ["via ", "fence"]
    assert output.content == [{"type": "text", "text": "via fence"}]
    assert openai_fake.requests[0].path == "/v1/chat/completions"
    assert openai_fake.requests[0].json()["model"] == "qwen2.5"
    assert model.adapter_ref()["settings"]["api"] == "chat"
    assert "litellm" not in sys.modules


@pytest.mark.parametrize(("route", "suggestion"), [
    ("anthropic/claude-sonnet", "threads.anthropic.anthropic"),
    ("bedrock/anthropic.claude-v2", "OpenAI-compatible"),
    ("vertex_ai/gemini-pro", "OpenAI-compatible"),
])
def test_other_routes_are_refused_with_a_reason(route: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as caught:
        litellm(route, api_key=CANARY_KEY, context_window=1000, max_output_tokens=10)
    assert caught.value.code == "transport_fence_unsupported"
    assert "fence" in caught.value.message
    assert suggestion in caught.value.message


@pytest.mark.parametrize("route", ["gpt-4o", "openai/"])
def test_malformed_routes_are_invalid_config(route: str) -> None:
    with pytest.raises(ConfigError) as caught:
        litellm(route, api_key=CANARY_KEY, context_window=1000, max_output_tokens=10)
    assert caught.value.code == "invalid_config"
