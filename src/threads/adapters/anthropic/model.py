"""``AnthropicModel``: the Messages API through the official ``anthropic`` SDK.

Built like the OpenAI adapter: one SDK client, retries off, HTTP through the run's fence. The
key comes from the argument or ``ANTHROPIC_API_KEY`` and is checked at construction.

Lookup is not offered: the Messages API keeps no retrievable record of a message (there is no
GET by id and no idempotency key), so an interrupted request cannot be proven to have run or not;
the loop records it as unknown and resends within its bounds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from threads.adapters.anthropic.messages import MessagesDialect
from threads.adapters.base import SdkModel, check_model_settings, endpoint_host
from threads.adapters.fenced_client import TaskFenceSlot, fenced_sdk_client
from threads.adapters.sdk_import import import_sdk
from threads.errors import ConfigError
from threads.log.json_types import JsonValue
from threads.models.protocol import Price

DEFAULT_HOST = "api.anthropic.com"


class AnthropicModel(SdkModel):
    """A ``threads.models.protocol.Model`` for Anthropic's Messages API."""


def build_anthropic_model(
    model: str, *, api_key: str | None, base_url: str | None, context_window: int,
    max_output_tokens: int, price: Price | None, params: Mapping[str, JsonValue] | None,
    timeout_s: float, streaming: bool,
) -> AnthropicModel:
    dialect = MessagesDialect(model, max_output_tokens)
    chosen = check_model_settings(
        model, context_window, max_output_tokens, params, dialect.reserved_params
    )
    endpoint = endpoint_host(base_url, DEFAULT_HOST)
    key = api_key or os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        raise ConfigError(
            "invalid_config", "no Anthropic API key: pass api_key= or set ANTHROPIC_API_KEY"
        )
    sdk = import_sdk("anthropic", "anthropic")
    slot = TaskFenceSlot()
    client = sdk.AsyncAnthropic(
        api_key=key, base_url=base_url, max_retries=0, timeout=timeout_s,
        http_client=fenced_sdk_client(slot, timeout=timeout_s),
    )
    return AnthropicModel(
        provider="anthropic", name=model, context_window=context_window,
        max_output_tokens=max_output_tokens, price=price, params=chosen, dialect=dialect,
        client=client, slot=slot, api_key=key, streaming=streaming,
        settings={"api": "messages", "endpoint": endpoint, "streaming": streaming},
    )
