"""LiteLLM-style routes, accepted only where threads can fence the traffic.

``openai/<model>`` (with ``api_base`` for any OpenAI-compatible server) is served by our own
OpenAI adapter over Chat Completions, as LiteLLM would, without importing litellm. Every other
prefix is refused at setup with ``transport_fence_unsupported``: litellm sends those requests
with HTTP clients it creates itself, which threads cannot route through its fence. Invariant: no
route accepted here can send a byte that did not pass the run's fence.
"""

from __future__ import annotations

from collections.abc import Mapping

from threads.adapters.openai.model import OpenAIApi, OpenAIModel, build_openai_model
from threads.errors import ConfigError
from threads.log.json_types import JsonValue
from threads.models.protocol import Price

_NATIVE = {"anthropic": "threads.anthropic.anthropic(...)", "openai": "threads.openai.openai(...)"}


def build_litellm_model(
    route: str, *, api_key: str | None, api_base: str | None, context_window: int,
    max_output_tokens: int, price: Price | None, params: Mapping[str, JsonValue] | None,
    api: OpenAIApi, timeout_s: float, streaming: bool,
) -> OpenAIModel:
    prefix, slash, model = route.partition("/")
    if not slash:
        raise ConfigError(
            "invalid_config",
            f"litellm route {route!r} has no provider prefix; write it as 'openai/<model>'",
        )
    if prefix != "openai":
        native = _NATIVE.get(prefix)
        instead = (f"use {native}" if native else
                   "use threads.openai.openai(...) or an 'openai/<model>' route with api_base "
                   "if the provider offers an OpenAI-compatible endpoint")
        raise ConfigError(
            "transport_fence_unsupported",
            f"litellm route {route!r} is sent by litellm with HTTP clients it creates itself; "
            "threads cannot pass those requests through the run's fence, so a run that lost "
            f"its branch could still send. Only 'openai/...' routes are supported; {instead}",
        )
    return build_openai_model(
        model, api_key=api_key, base_url=api_base, context_window=context_window,
        max_output_tokens=max_output_tokens, price=price, api=api, params=params,
        timeout_s=timeout_s, streaming=streaming,
    )
