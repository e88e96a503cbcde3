"""``threads.anthropic.anthropic(...)``: an Anthropic (Claude) model for an agent.

Needs the ``anthropic`` extra (``pip install 'threads[anthropic]'``); importing this module does
not.
"""

from __future__ import annotations

from collections.abc import Mapping

from threads.adapters.anthropic.model import AnthropicModel, build_anthropic_model
from threads.log.json_types import JsonValue
from threads.models.protocol import Price

__all__ = ["AnthropicModel", "anthropic"]


def anthropic(
    model: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    context_window: int = 200_000,
    max_output_tokens: int,
    price: Price | None = None,
    params: Mapping[str, JsonValue] | None = None,
    timeout_s: float = 600.0,
    streaming: bool = True,
) -> AnthropicModel:
    """A Claude model over the Messages API. ``params`` (temperature, thinking, ...) are pinned
    in the thread and sent with every request; ``streaming=False`` makes one plain call per
    request and yields only the final output."""
    return build_anthropic_model(
        model, api_key=api_key, base_url=base_url, context_window=context_window,
        max_output_tokens=max_output_tokens, price=price, params=params, timeout_s=timeout_s,
        streaming=streaming,
    )
