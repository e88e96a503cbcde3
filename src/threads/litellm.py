"""``threads.litellm.litellm(route, ...)``: LiteLLM-style model routes that threads can fence.

Only ``openai/<model>`` routes are accepted (served by threads' OpenAI adapter; litellm itself
is not imported); see ``threads.adapters.litellm`` for why the others are refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from threads.adapters.litellm import build_litellm_model
from threads.adapters.openai.model import OpenAIApi, OpenAIModel
from threads.log.json_types import JsonValue
from threads.models.protocol import Price

__all__ = ["litellm"]


def litellm(
    route: str,
    *,
    api_key: str | None = None,
    api_base: str | None = None,
    context_window: int,
    max_output_tokens: int,
    price: Price | None = None,
    params: Mapping[str, JsonValue] | None = None,
    api: OpenAIApi = "chat",
    timeout_s: float = 600.0,
    streaming: bool = True,
) -> OpenAIModel:
    """A model for ``route`` (``"openai/<model>"``; ``api_base`` points it at any
    OpenAI-compatible server). Other routes raise ``ConfigError("transport_fence_unsupported")``."""
    return build_litellm_model(
        route, api_key=api_key, api_base=api_base, context_window=context_window,
        max_output_tokens=max_output_tokens, price=price, params=params, api=api,
        timeout_s=timeout_s, streaming=streaming,
    )
