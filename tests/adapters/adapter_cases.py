"""Shared pieces of the adapter tests: a fixed request, a collector, and ``AdapterContract``,
the behaviour every adapter must show against its fake (each test file subclasses it)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from threads.adapters.base import SdkModel
from threads.models.fence import Fence, OpenFence
from threads.models.protocol import (
    ModelCallError,
    ModelOutput,
    ModelRequest,
    TextDelta,
    ToolDefinition,
    Usage,
)
from threads.testing.fake_providers import (
    FakeProvider,
    ScriptedError,
    ScriptedMalformed,
    ScriptedStall,
    ScriptedToolCall,
    ScriptedTurn,
    ScriptedUsage,
)

CANARY_KEY = "sk-canary-XYZ0123456789abcdefCANARY"
GOLDEN_DIR = Path(__file__).parent / "golden"
Build = Callable[..., SdkModel]

WEATHER_TOOL = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]},
)


def golden_request() -> ModelRequest:
    """System, user text, an assistant turn with text and a tool call, and its tool result."""
    return ModelRequest(
        request_key="br_1:ev_1",
        system="You are terse.",
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "call_id": "call_1", "name": "get_weather",
                 "input": {"city": "Paris"}},
            ]},
            {"role": "tool", "call_id": "call_1", "is_error": False,
             "content": [{"type": "text", "text": "18C, cloudy"}]},
        ],
        tools=[WEATHER_TOOL],
        params={"temperature": 0},
    )


def simple_request(text: str = "Hi") -> ModelRequest:
    return ModelRequest(
        request_key="br_1:ev_2", system="", tools=[WEATHER_TOOL], params={},
        messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
    )


async def collect(
    model: SdkModel, request: ModelRequest | None = None, fence: Fence | None = None
) -> tuple[list[str], ModelOutput]:
    """Run one call; return the live text deltas and the single final output."""
    deltas: list[str] = []
    outputs: list[ModelOutput] = []
    async for item in model.stream(request or simple_request(), fence or OpenFence()):
        if isinstance(item, TextDelta):
            assert not outputs, "a delta came after the output"
            deltas.append(item.text)
        else:
            outputs.append(item)
    assert len(outputs) == 1
    return deltas, outputs[0]


async def failure(model: SdkModel, request: ModelRequest | None = None,
                  fence: Fence | None = None) -> ModelCallError:
    """Run one call that must fail without yielding any output; return its error."""
    items: list[TextDelta | ModelOutput] = []
    with pytest.raises(ModelCallError) as caught:
        await _drain(model.stream(request or simple_request(), fence or OpenFence()), items)
    assert not any(isinstance(item, ModelOutput) for item in items), "a broken call yielded"
    return caught.value


async def _drain(
    stream: AsyncIterator[TextDelta | ModelOutput], into: list[TextDelta | ModelOutput]
) -> None:
    async for item in stream:
        into.append(item)  # noqa: PERF401  (keep what came before the error)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def assert_golden(name: str, body: Any) -> None:
    """Compare a recorded request body with ``golden/<name>.json``
    (``THREADS_REGEN_GOLDEN=1`` rewrites it; review the diff)."""
    path = GOLDEN_DIR / f"{name}.json"
    if os.environ.get("THREADS_REGEN_GOLDEN") == "1":
        path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    assert body == golden_body(name)


def golden_body(name: str) -> Any:
    return json.loads((GOLDEN_DIR / f"{name}.json").read_text())


def parallel_calls() -> list[ScriptedToolCall]:
    return [
        ScriptedToolCall("call_a", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}']),
        ScriptedToolCall("call_b", "get_weather", ['{"city"', ': "Oslo"}']),
    ]


class AdapterContract:
    """What every adapter must do. Subclasses provide the ``fake`` and ``build`` fixtures and
    the class attributes below."""

    context_error: ClassVar[ScriptedError]
    usage_case: ClassVar[tuple[ScriptedUsage, Usage]]
    missing_fields: ClassVar[str]  # a JSON body/event that parses but lacks required fields

    async def test_text_reply(self, fake: FakeProvider, build: Build, streaming: bool) -> None:
        fake.script(ScriptedTurn(text_chunks=["Hel", "lo", "!"], response_id="id_text"))
        deltas, output = await collect(build(streaming=streaming))
        assert deltas == (["Hel", "lo", "!"] if streaming else [])
        assert output.content == [{"type": "text", "text": "Hello!"}]
        assert output.stop_reason == "end_turn"
        assert output.provider_request_id == "id_text"

    async def test_one_tool_call_with_fragmented_arguments(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(ScriptedTurn(
            text_chunks=["Let me check."],
            tool_calls=[ScriptedToolCall("call_1", "get_weather", ['{"', 'city":', ' "Paris"}'])],
        ))
        _, output = await collect(build(streaming=streaming))
        assert output.content == [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "call_id": "call_1", "name": "get_weather",
             "input": {"city": "Paris"}},
        ]
        assert output.stop_reason == "tool_use"

    async def test_parallel_tool_calls(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(ScriptedTurn(tool_calls=parallel_calls()))
        deltas, output = await collect(build(streaming=streaming))
        assert deltas == []
        assert output.content == [
            {"type": "tool_use", "call_id": "call_a", "name": "get_weather",
             "input": {"city": "Paris"}},
            {"type": "tool_use", "call_id": "call_b", "name": "get_weather",
             "input": {"city": "Oslo"}},
        ]
        assert output.stop_reason == "tool_use"

    async def test_usage_is_mapped(self, fake: FakeProvider, build: Build, streaming: bool) -> None:
        scripted, expected = self.usage_case
        fake.script(ScriptedTurn(text_chunks=["ok"], usage=scripted))
        _, output = await collect(build(streaming=streaming))
        assert output.usage == expected

    async def test_absent_usage_is_unknown_not_zero(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(ScriptedTurn(text_chunks=["ok"], usage=None))
        _, output = await collect(build(streaming=streaming))
        assert output.usage.input_tokens is None
        assert output.usage.output_tokens is None

    async def test_max_tokens_stop(self, fake: FakeProvider, build: Build, streaming: bool) -> None:
        fake.script(ScriptedTurn(text_chunks=["trunc"], stop="max_tokens"))
        _, output = await collect(build(streaming=streaming))
        assert output.stop_reason == "max_tokens"

    async def test_429_is_retryable_with_retry_after(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(ScriptedError(429, "slow down", headers={"retry-after": "2"}))
        error = await failure(build(streaming=streaming))
        assert (error.reason, error.provider_outcome, error.retryable) == (
            "rate_limited", "failed", True)
        assert (error.retry_after_ms, error.http_status) == (2000, 429)

    async def test_retry_after_ms_wins_and_is_bounded(
        self, fake: FakeProvider, build: Build
    ) -> None:
        fake.script(
            ScriptedError(429, "slow", headers={"retry-after-ms": "250", "retry-after": "9"}),
            ScriptedError(429, "slow", headers={"retry-after": "86400"}),
        )
        model = build()
        assert (await failure(model)).retry_after_ms == 250
        assert (await failure(model)).retry_after_ms == 10 * 60 * 1000

    async def test_529_is_overloaded(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(ScriptedError(529, "Overloaded", error_type="overloaded_error"))
        error = await failure(build(streaming=streaming))
        assert (error.reason, error.provider_outcome, error.retryable, error.http_status) == (
            "overloaded", "failed", True, 529)

    async def test_500_outcome_is_unknown(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(ScriptedError(500, "boom"))
        error = await failure(build(streaming=streaming))
        assert (error.reason, error.provider_outcome, error.retryable, error.http_status) == (
            "server_error", "unknown", False, 500)

    async def test_context_length_is_context_exhausted(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(self.context_error)
        error = await failure(build(streaming=streaming))
        assert (error.code, error.reason, error.provider_outcome) == (
            "context_exhausted", "prompt_too_long", "failed")

    @pytest.mark.parametrize("status", [401, 403, 404])
    async def test_auth_and_missing_model_are_model_unavailable(
        self, fake: FakeProvider, build: Build, status: int
    ) -> None:
        fake.script(ScriptedError(status, "no access"))
        error = await failure(build())
        assert (error.code, error.provider_outcome, error.http_status) == (
            "model_unavailable", "failed", status)
        assert "no access" in error.message

    async def test_malformed_json_is_model_error_and_yields_nothing(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(ScriptedMalformed())
        error = await failure(build(streaming=streaming))
        assert (error.code, error.provider_outcome, error.terminal) == (
            "model_error", "unknown", True)

    async def test_missing_fields_is_model_error(
        self, fake: FakeProvider, build: Build, streaming: bool
    ) -> None:
        fake.script(ScriptedMalformed(self.missing_fields))
        error = await failure(build(streaming=streaming))
        assert (error.code, error.provider_outcome, error.terminal) == (
            "model_error", "unknown", True)

    async def test_stream_cut_midway_is_stream_broken(
        self, fake: FakeProvider, build: Build
    ) -> None:
        fake.script(ScriptedTurn(text_chunks=["a", "b", "c", "d"], cut_after_events=4))
        error = await failure(build(streaming=True))
        assert (error.reason, error.provider_outcome, error.terminal) == (
            "stream_broken", "unknown", False)

    async def test_timeout_outcome_is_unknown(self, fake: FakeProvider, build: Build) -> None:
        fake.script(ScriptedStall())
        error = await failure(build(timeout_s=0.2))
        assert (error.reason, error.provider_outcome) == ("timeout", "unknown")
        assert len(fake.requests) == 1

    async def test_connection_refused_is_not_sent(self, build: Build) -> None:
        model = build(base_url_override=f"http://127.0.0.1:{closed_port()}")
        error = await failure(model)
        assert error.provider_outcome == "not_sent"

    async def test_one_client_serves_several_calls(self, fake: FakeProvider, build: Build) -> None:
        fake.script(*(ScriptedTurn(text_chunks=[f"n{i}"]) for i in range(3)))
        model = build()
        texts = [(await collect(model))[1].content[0]["text"] for _ in range(3)]
        assert texts == ["n0", "n1", "n2"]
        assert len(fake.connections) == 1  # keep-alive: the fenced client pools connections
