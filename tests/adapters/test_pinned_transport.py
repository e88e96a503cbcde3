"""A thread is not pinned to transport: the same model reached with streaming off, another
timeout, or ``localhost`` for ``127.0.0.1`` in its base URL runs the thread on (each real
adapter against its fake). What the model is asked is pinned: another temperature is refused
``invalid_config`` naming the key and both values, with no credential in the message."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from adapter_cases import CANARY_KEY

from threads import Completed, ConfigError, FakeClock, agent, sqlite
from threads.adapters.base import SdkModel
from threads.anthropic import anthropic
from threads.openai import openai
from threads.testing.fake_providers import (
    AnthropicFake,
    FakeProvider,
    OpenAIFake,
    ScriptedTurn,
    ScriptedUsage,
)

Build = Callable[[str, bool, float, float], SdkModel]


def _openai(url: str, streaming: bool, timeout_s: float, temperature: float) -> SdkModel:
    return openai("gpt-test", api_key=CANARY_KEY, base_url=url, context_window=128_000,
                  max_output_tokens=1024, api="chat", streaming=streaming,
                  timeout_s=timeout_s, params={"temperature": temperature})


def _anthropic(url: str, streaming: bool, timeout_s: float, temperature: float) -> SdkModel:
    return anthropic("claude-test", api_key=CANARY_KEY, base_url=url, max_output_tokens=1024,
                     streaming=streaming, timeout_s=timeout_s,
                     params={"temperature": temperature})


PROVIDERS: dict[str, tuple[type[FakeProvider], Build]] = {
    "openai": (OpenAIFake, _openai),
    "anthropic": (AnthropicFake, _anthropic),
}


def reply(text: str) -> ScriptedTurn:
    return ScriptedTurn(text_chunks=[text], usage=ScriptedUsage(10, 2))


@pytest.mark.parametrize("name", list(PROVIDERS))
async def test_transport_changes_run_the_thread_on_and_a_param_change_is_named(
    name: str, tmp_path: Path
) -> None:
    fake_type, build = PROVIDERS[name]
    store = sqlite(tmp_path / "store", clock=FakeClock())
    async with fake_type() as fake:
        fake.script(reply("one"), reply("two"))
        loopback = fake.base_url
        renamed = loopback.replace("127.0.0.1", "localhost")
        first_model = build(loopback, True, 600.0, 0.2)
        again_model = build(renamed, False, 30.0, 0.2)  # another spelling, no stream, timeout
        hotter = build(loopback, True, 600.0, 0.7)
        try:
            first = await agent(name="a", model=first_model, instructions="Hi.").run(
                "hello", store=store)
            assert isinstance(first, Completed), first
            again = await agent(name="a", model=again_model, instructions="Hi.").run(
                "more", thread=first.thread.id, store=store)
            assert isinstance(again, Completed), again
            assert again.output == "two"
            with pytest.raises(ConfigError) as caught:
                await agent(name="a", model=hotter, instructions="Hi.").run(
                    "hotter", thread=first.thread.id, store=store)
        finally:
            for model in (first_model, again_model, hotter):
                await model.aclose()
            await store.close()
    assert caught.value.code == "invalid_config"
    assert "changed: model_params.temperature: 0.2 -> 0.7" in caught.value.message
    assert CANARY_KEY not in caught.value.message
