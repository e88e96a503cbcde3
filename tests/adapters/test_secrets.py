"""A canary API key must never show up anywhere but the Authorization header the provider got:
not in errors (even when the provider echoes it), reprs, ``adapter_ref``, params or bodies."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from adapter_cases import CANARY_KEY, closed_port, collect, failure, golden_request

from threads.adapters.base import SdkModel
from threads.adapters.errors import redact
from threads.anthropic import anthropic
from threads.errors import ConfigError
from threads.openai import openai
from threads.testing.fake_providers import (
    AnthropicFake,
    FakeProvider,
    OpenAIFake,
    ScriptedError,
    ScriptedMalformed,
    ScriptedStall,
    ScriptedTurn,
)

Factory = Callable[..., SdkModel]


def _openai(api: Any) -> Factory:
    def make(url: str, **kw: Any) -> SdkModel:
        return openai("m", api_key=CANARY_KEY, base_url=url, context_window=1000,
                      max_output_tokens=10, api=api, **kw)
    return make


def _anthropic(url: str, **kw: Any) -> SdkModel:
    return anthropic("m", api_key=CANARY_KEY, base_url=url, max_output_tokens=10, **kw)


ADAPTERS: dict[str, tuple[type[FakeProvider], Factory]] = {
    "openai-responses": (OpenAIFake, _openai("responses")),
    "openai-chat": (OpenAIFake, _openai("chat")),
    "anthropic": (AnthropicFake, _anthropic),
}

# Providers echo (masked) keys back in 401 bodies; the fake echoes the full canary.
ECHOING_FAILURES = [
    ScriptedError(401, f"Incorrect API key provided: {CANARY_KEY}."),
    ScriptedError(500, f"internal error for key {CANARY_KEY[:12]}****{CANARY_KEY[-4:]}"),
    ScriptedError(429, f"rate limit for {CANARY_KEY}", headers={"retry-after": "1"}),
    ScriptedMalformed(f"not json {CANARY_KEY}"),
]


def _assert_clean(text: str) -> None:
    assert CANARY_KEY not in text
    assert CANARY_KEY[:12] not in text  # nor a recognisable prefix of it


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_key_never_leaks(adapter: str, models: list[SdkModel]) -> None:
    fake_type, factory = ADAPTERS[adapter]
    async with fake_type() as fake:
        model = factory(fake.base_url)
        timed = factory(fake.base_url, timeout_s=0.2)
        refused = factory(f"http://127.0.0.1:{closed_port()}")
        models.extend([model, timed, refused])
        for text in (repr(model), json.dumps(model.adapter_ref()), json.dumps(model.params())):
            _assert_clean(text)
        fake.script(*ECHOING_FAILURES, ScriptedStall(), ScriptedTurn(text_chunks=["ok"]))
        errors = [await failure(model) for _ in ECHOING_FAILURES]
        errors.append(await failure(timed))
        errors.append(await failure(refused))
        _, output = await collect(model, golden_request())
        for error in errors:
            _assert_clean(error.message)
            _assert_clean(str(error))
            assert error.__suppress_context__  # the SDK exception (with its request) is hidden
        _assert_clean(repr(output))
        for request in fake.requests:
            _assert_clean(request.body.decode())
            others = {k: v for k, v in request.headers.items() if k != "authorization"}
            _assert_clean(json.dumps(others))
            assert CANARY_KEY in request.headers["authorization"]


def test_redact_scrubs_exact_and_key_shaped_tokens() -> None:
    text = f"key {CANARY_KEY}, other sk-ant-api03-abcdefgh, header Bearer abc.def"
    assert redact(text, [CANARY_KEY]) == "key [redacted], other [redacted], header [redacted]"


@pytest.mark.parametrize(("builder", "env"), [
    (lambda: openai("m", context_window=10, max_output_tokens=1), "OPENAI_API_KEY"),
    (lambda: anthropic("m", max_output_tokens=1), "ANTHROPIC_API_KEY"),
])
def test_missing_key_is_a_config_error(
    builder: Callable[[], SdkModel], env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(env, raising=False)
    with pytest.raises(ConfigError) as caught:
        builder()
    assert caught.value.code == "invalid_config"
    assert env in caught.value.message


async def test_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    model = openai("m", context_window=10, max_output_tokens=1)
    try:
        assert CANARY_KEY not in repr(model)
    finally:
        await model.aclose()
