"""The Anthropic adapter: one model class over the official SDK (``model``) speaking the
Messages API through its dialect (``messages``). Users build it with
``threads.anthropic.anthropic(...)``."""

from threads.adapters.anthropic.model import AnthropicModel, build_anthropic_model

__all__ = ["AnthropicModel", "build_anthropic_model"]
