"""Every SDK adapter pins its output cap as ``max_tokens`` and sends exactly that cap under the
provider's own name, so a cost budget can bound each attempt (a stream cut before its usage
arrived costs at most ``max_tokens`` of output) without extra configuration, and the bound is
never below what a request may really be billed for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from adapter_cases import CANARY_KEY, collect, simple_request

from threads import Budget, ConfigError, Price, agent
from threads.adapters.base import SdkModel
from threads.anthropic import anthropic
from threads.models.protocol import ModelRequest
from threads.openai import openai
from threads.testing.fake_providers import AnthropicFake, OpenAIFake, ScriptedTurn

PRICE = Price(input=3, output=15)

# (adapter, the body field the provider reads its output cap from)
CASES = [("chat", "max_completion_tokens"), ("responses", "max_output_tokens"),
         ("anthropic", "max_tokens")]


def _make(kind: str, base_url: str, **kw: Any) -> SdkModel:
    common: dict[str, Any] = {"api_key": CANARY_KEY, "base_url": base_url, "price": PRICE,
                              "context_window": 8000, "max_output_tokens": 1024, **kw}
    if kind == "anthropic":
        return anthropic("claude-test", **common)
    return openai("gpt-test", api=kind, **common)


@pytest.fixture
def make(
    openai_fake: OpenAIFake, anthropic_fake: AnthropicFake, models: list[SdkModel]
) -> Callable[..., tuple[SdkModel, OpenAIFake | AnthropicFake]]:
    def build(kind: str, **kw: Any) -> tuple[SdkModel, OpenAIFake | AnthropicFake]:
        fake: OpenAIFake | AnthropicFake = anthropic_fake if kind == "anthropic" else openai_fake
        model = _make(kind, fake.base_url, **kw)
        models.append(model)
        return model, fake

    return build


@pytest.mark.parametrize(("kind", "field"), CASES)
async def test_the_pinned_cap_is_what_each_request_sends(
    make: Callable[..., tuple[SdkModel, Any]], kind: str, field: str
) -> None:
    model, fake = make(kind, params={"max_tokens": 300})
    assert model.params()["max_tokens"] == 300
    fake.script(ScriptedTurn(text_chunks=["ok"]))
    request = simple_request()
    await collect(model, ModelRequest(
        request_key=request.request_key, system=request.system, messages=request.messages,
        tools=request.tools, params=model.params(),
    ))
    body = fake.requests[0].json()
    assert body[field] == 300
    other_caps = {"max_tokens", "max_completion_tokens", "max_output_tokens"} - {field}
    assert not other_caps & body.keys()  # one cap, never two that could disagree


@pytest.mark.parametrize(("kind", "field"), CASES)
def test_without_params_the_cap_is_the_model_s_and_a_cost_budget_is_enforceable(
    make: Callable[..., tuple[SdkModel, Any]], kind: str, field: str
) -> None:
    model, _ = make(kind)
    assert model.params() == {"max_tokens": 1024}
    agent(name="a", model=model, budget=Budget(max_cost_nanos=10**9))  # no budget_unenforceable


@pytest.mark.parametrize(("kind", "field"), CASES)
@pytest.mark.parametrize("cap", [0, -1, 1025, True, 2.5, "300"])
def test_a_cap_that_is_not_an_integer_up_to_max_output_tokens_is_refused(
    kind: str, field: str, cap: object
) -> None:
    with pytest.raises(ConfigError) as refused:
        _make(kind, "http://127.0.0.1:9", params={"max_tokens": cap})
    assert refused.value.code == "invalid_config"
    assert "max_tokens" in refused.value.message


@pytest.mark.parametrize(("kind", "field"), [c for c in CASES if c[1] != "max_tokens"])
def test_the_provider_s_own_cap_name_is_refused_in_params(kind: str, field: str) -> None:
    """It would be sent beside the pinned cap, and a larger one would be billed past the bound."""
    with pytest.raises(ConfigError) as refused:
        _make(kind, "http://127.0.0.1:9", params={field: 5000})
    assert refused.value.code == "invalid_config"
    assert field in refused.value.message
