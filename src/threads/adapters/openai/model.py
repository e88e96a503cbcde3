"""``OpenAIModel``: the Responses API or Chat Completions through the official ``openai`` SDK.

The SDK client is built once with retries off (the run loop records every retry itself) and an
HTTP client whose transport checks the run's fence before each send. Invariants: those of
``SdkModel``; the key comes from the argument or ``OPENAI_API_KEY`` and is checked at
construction, never at the first call.

Lookup ("did this interrupted request go through?") is deliberately not offered. The Responses
API can retrieve a stored response by its id, but the id reaches us only in the stream's first
event, which a crash or cut may precede, and the id is not in the log; responses cannot be
listed or searched by a client key (``metadata`` is not queryable). Stored chat completions can
be listed by metadata, but only with ``store=true`` and with no guarantee a missing entry means
"never ran", so a not-found would not be final. Claiming a lookup we cannot back would let
recovery trust a false "not found"; without it the loop records the attempt as unknown and
resends within its bounds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from threads.adapters.base import SdkModel, check_model_settings, endpoint_host
from threads.adapters.fenced_client import TaskFenceSlot, fenced_sdk_client
from threads.adapters.openai.chat import ChatDialect
from threads.adapters.openai.responses import ResponsesDialect
from threads.adapters.sdk_import import import_sdk
from threads.errors import ConfigError
from threads.log.json_types import JsonValue
from threads.models.protocol import Price

OpenAIApi = Literal["responses", "chat"]
DEFAULT_HOST = "api.openai.com"


class OpenAIModel(SdkModel):
    """A ``threads.models.protocol.Model`` for OpenAI and OpenAI-compatible servers."""


def build_openai_model(
    model: str, *, api_key: str | None, base_url: str | None, context_window: int,
    max_output_tokens: int, price: Price | None, api: OpenAIApi,
    params: Mapping[str, JsonValue] | None, timeout_s: float, streaming: bool,
    provider: str = "openai",
) -> OpenAIModel:
    if api not in ("responses", "chat"):
        raise ConfigError("invalid_config", f"api must be 'responses' or 'chat', not {api!r}")
    dialect = (ResponsesDialect if api == "responses" else ChatDialect)(model, max_output_tokens)
    chosen = check_model_settings(
        model, context_window, max_output_tokens, params, dialect.reserved_params
    )
    endpoint = endpoint_host(base_url, DEFAULT_HOST)
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if not key:
        raise ConfigError(
            "invalid_config",
            "no OpenAI API key: pass api_key= or set OPENAI_API_KEY (a local OpenAI-compatible "
            "server that ignores keys still needs a placeholder such as api_key='unused')",
        )
    sdk = import_sdk("openai", "openai")
    slot = TaskFenceSlot()
    client = sdk.AsyncOpenAI(
        api_key=key, base_url=base_url, max_retries=0, timeout=timeout_s,
        http_client=fenced_sdk_client(slot, timeout=timeout_s),
    )
    return OpenAIModel(
        provider=provider, name=model, context_window=context_window,
        max_output_tokens=max_output_tokens, price=price, params=chosen, dialect=dialect,
        client=client, slot=slot, api_key=key, streaming=streaming,
        settings={"api": api, "endpoint": endpoint, "streaming": streaming},
    )
