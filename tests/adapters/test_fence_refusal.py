"""A fence that refuses stops the request before any connection is opened, for every adapter;
and one adapter shared by concurrent runs sends each request under its own run's fence."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from adapter_cases import CANARY_KEY, collect, failure

from threads.adapters.base import SdkModel
from threads.adapters.fenced_client import TaskFenceSlot
from threads.anthropic import anthropic
from threads.errors import StoreError
from threads.models.fence import CallbackFence
from threads.openai import openai
from threads.testing.fake_providers import AnthropicFake, FakeProvider, OpenAIFake, ScriptedTurn

Factory = Callable[[str, bool], SdkModel]

ADAPTERS: dict[str, tuple[type[FakeProvider], Factory]] = {
    "openai-responses": (OpenAIFake, lambda url, s: openai(
        "m", api_key=CANARY_KEY, base_url=url, context_window=1000, max_output_tokens=10,
        api="responses", streaming=s)),
    "openai-chat": (OpenAIFake, lambda url, s: openai(
        "m", api_key=CANARY_KEY, base_url=url, context_window=1000, max_output_tokens=10,
        api="chat", streaming=s)),
    "anthropic": (AnthropicFake, lambda url, s: anthropic(
        "m", api_key=CANARY_KEY, base_url=url, max_output_tokens=10, streaming=s)),
}


async def _stale() -> None:
    raise StoreError("stale_epoch", "the lease moved to epoch 8")


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_refused_fence_sends_nothing(
    adapter: str, streaming: bool, models: list[SdkModel]
) -> None:
    fake_type, factory = ADAPTERS[adapter]
    async with fake_type() as fake:
        fake.script(ScriptedTurn(text_chunks=["never"]))
        model = factory(fake.base_url, streaming)
        models.append(model)
        error = await failure(model, fence=CallbackFence(_stale))
        assert (error.code, error.provider_outcome) == ("stale_epoch", "not_sent")
        assert fake.connections == []
        assert fake.requests == []


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_concurrent_runs_each_use_their_own_fence(
    adapter: str, models: list[SdkModel]
) -> None:
    """Run A's fence refuses while run B's passes, on one shared adapter; B's call must go out
    and A's must not, whichever task set its fence last."""
    fake_type, factory = ADAPTERS[adapter]
    async with fake_type() as fake:
        fake.script(ScriptedTurn(text_chunks=["for B"]))
        model = factory(fake.base_url, True)
        models.append(model)
        both_set = asyncio.Barrier(2)

        async def fence_a() -> None:
            await both_set.wait()
            raise StoreError("stale_epoch", "A lost its lease")

        async def fence_b() -> None:
            await both_set.wait()

        a, b = await asyncio.gather(
            failure(model, fence=CallbackFence(fence_a)),
            collect(model, fence=CallbackFence(fence_b)),
        )
        assert a.code == "stale_epoch"
        assert b[1].content == [{"type": "text", "text": "for B"}]
        assert len(fake.requests) == 1


async def test_an_unset_slot_refuses() -> None:
    """Before any run set a fence, the adapter's client refuses to send at all."""
    with pytest.raises(StoreError) as caught:
        await TaskFenceSlot().get().check()
    assert caught.value.code == "stale_epoch"
