"""The OpenAI adapter: one model class over the official SDK (``model``) that speaks the
Responses API (``responses``) or Chat Completions (``chat``, also for OpenAI-compatible servers),
each a dialect turning Render v1 into the provider's request and its reply back. Users build it
with ``threads.openai.openai(...)``."""

from threads.adapters.openai.model import OpenAIApi, OpenAIModel, build_openai_model

__all__ = ["OpenAIApi", "OpenAIModel", "build_openai_model"]
