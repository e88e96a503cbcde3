"""Adapter overhead: median µs per streamed request through threads' adapter vs the same SDK
call made directly (same fake server on loopback, same body, same SDK), in one run.

The difference is what threads adds per request: rendering Render v1 to the wire body, the
fence check in the transport, converting events to plain data and assembling the output.
Run: ``PYTHONPATH=src python bench/adapter_overhead.py [requests]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic as anthropic_sdk
import openai as openai_sdk

from threads.adapters.base import SdkModel
from threads.anthropic import anthropic
from threads.models.fence import OpenFence
from threads.models.protocol import ModelRequest, ToolDefinition
from threads.openai import openai
from threads.testing.fake_providers import (
    AnthropicFake,
    FakeProvider,
    OpenAIFake,
    ScriptedToolCall,
    ScriptedTurn,
    ScriptedUsage,
)

KEY = "sk-bench-0000000000"
TURN = ScriptedTurn(
    text_chunks=["The ", "weather ", "is ", "fine."] * 5,
    tool_calls=[ScriptedToolCall("c1", "get_weather", ['{"city"', ': "Paris"}'])],
    usage=ScriptedUsage(100, 20, cache_read_tokens=50),
)
REQUEST = ModelRequest(
    request_key="br:ev", system="Be brief.",
    messages=[{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}],
    tools=[ToolDefinition("get_weather", "Weather.", {"type": "object"})], params={},
)


async def ours(model: SdkModel) -> None:
    async for _ in model.stream(REQUEST, OpenFence()):
        pass


async def timed(call: Callable[[], Awaitable[None]], fake: FakeProvider, n: int) -> list[float]:
    fake.script(*([TURN] * n))
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


async def compare(
    label: str, fake: FakeProvider, model: SdkModel, direct: Callable[[], Awaitable[None]], n: int
) -> None:
    await timed(lambda: ours(model), fake, 20)  # warm both paths (connections, imports)
    await timed(direct, fake, 20)
    ours_us, direct_us = [], []
    for _ in range(5):  # interleave blocks so drift hits both sides alike
        ours_us += await timed(lambda: ours(model), fake, n // 5)
        direct_us += await timed(direct, fake, n // 5)
    a, b = statistics.median(ours_us), statistics.median(direct_us)
    print(f"{label:<30} adapter {a:8.0f} µs   direct SDK {b:8.0f} µs   "
          f"overhead {a - b:+7.0f} µs ({a / b:.2f}x)")


def bare_sdk_call(model: SdkModel, client: Any) -> Callable[[], Awaitable[None]]:
    """The same SDK request the adapter makes (same rendered body), on a plain SDK client."""
    dialect = model._dialect
    body = dialect.render(REQUEST, streaming=True)

    async def call() -> None:
        async with await dialect.send(client, body) as events:
            async for _ in events:
                pass

    return call


async def main(n: int) -> None:
    cases: list[tuple[str, type[FakeProvider], Callable[[str], SdkModel], Callable[[str], Any]]] = [
        ("openai responses (streamed)", OpenAIFake,
         lambda url: openai("gpt-bench", api_key=KEY, base_url=url, context_window=128_000,
                            max_output_tokens=256, api="responses"),
         lambda url: openai_sdk.AsyncOpenAI(api_key=KEY, base_url=url, max_retries=0)),
        ("openai chat (streamed)", OpenAIFake,
         lambda url: openai("gpt-bench", api_key=KEY, base_url=url, context_window=128_000,
                            max_output_tokens=256, api="chat"),
         lambda url: openai_sdk.AsyncOpenAI(api_key=KEY, base_url=url, max_retries=0)),
        ("anthropic messages (streamed)", AnthropicFake,
         lambda url: anthropic("claude-bench", api_key=KEY, base_url=url, max_output_tokens=256),
         lambda url: anthropic_sdk.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0)),
    ]
    for label, fake_type, build_model, build_client in cases:
        async with fake_type() as fake:
            model, client = build_model(fake.base_url), build_client(fake.base_url)
            await compare(label, fake, model, bare_sdk_call(model, client), n)
            await client.close()
            await model.aclose()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500))
