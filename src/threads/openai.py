"""``threads.openai.openai(...)``: an OpenAI (or OpenAI-compatible) model for an agent.

Needs the ``openai`` extra (``pip install 'threads[openai]'``); importing this module does not.
"""

from __future__ import annotations

from collections.abc import Mapping

from threads.adapters.openai.model import OpenAIApi, OpenAIModel, build_openai_model
from threads.log.json_types import JsonValue
from threads.models.protocol import Price

__all__ = ["OpenAIModel", "openai"]


def openai(
    model: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    context_window: int,
    max_output_tokens: int,
    price: Price | None = None,
    api: OpenAIApi = "responses",
    params: Mapping[str, JsonValue] | None = None,
    timeout_s: float = 600.0,
    streaming: bool = True,
) -> OpenAIModel:
    """An OpenAI model over the Responses API (``api="responses"``) or Chat Completions
    (``api="chat"``, also for Ollama/vLLM/llama.cpp via ``base_url``). ``params`` (temperature,
    reasoning, ...) are pinned in the thread and sent with every request; ``streaming=False``
    makes one plain call per request and yields only the final output."""
    return build_openai_model(
        model, api_key=api_key, base_url=base_url, context_window=context_window,
        max_output_tokens=max_output_tokens, price=price, api=api, params=params,
        timeout_s=timeout_s, streaming=streaming,
    )
