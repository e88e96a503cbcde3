"""The model the demo runs on: the scripted one (no key), or a real provider chosen with
``threads demo --model openai:MODEL`` / ``anthropic:MODEL``.

The parent checks the choice before any worker starts (``demo_model``), so a missing key or extra
is one clear error; workers rebuild the same model from ``THREADS_DEMO_MODEL``.
``THREADS_DEMO_BASE_URL`` points the adapter at another server (a local OpenAI-compatible
server, or the fake providers in tests). Invariant: the key is read from the environment by the
adapter and never passed through argv, the demo's files or its output.
"""

from __future__ import annotations

import os

from threads.errors import ConfigError
from threads.models.protocol import Model

MODEL_ENV = "THREADS_DEMO_MODEL"
BASE_URL_ENV = "THREADS_DEMO_BASE_URL"
CONTEXT_WINDOW = 128_000  # declared, not discovered: the demo sets no budget that relies on it
MAX_OUTPUT_TOKENS = 2_048
USAGE = "--model takes PROVIDER:MODEL, e.g. openai:gpt-4.1 or anthropic:claude-sonnet-4-5"


def demo_model(choice: str) -> Model:
    """The adapter for ``choice``. Raises ``ConfigError`` (bad choice, no key) or ``ImportError``
    (the provider's extra is not installed)."""
    provider, sep, name = choice.partition(":")
    if not sep or not name.strip():
        raise ConfigError("invalid_config", f"{choice!r}: {USAGE}")
    base_url = os.environ.get(BASE_URL_ENV) or None
    if provider == "openai":
        from threads.openai import openai

        return openai(name, base_url=base_url, context_window=CONTEXT_WINDOW,
                      max_output_tokens=MAX_OUTPUT_TOKENS)
    if provider == "anthropic":
        from threads.anthropic import anthropic

        return anthropic(name, base_url=base_url, max_output_tokens=MAX_OUTPUT_TOKENS)
    raise ConfigError("invalid_config", f"unknown provider {provider!r}: {USAGE}")


def chosen_model() -> Model | None:
    """In a worker: the model the parent chose, or ``None`` for the scripted one."""
    choice = os.environ.get(MODEL_ENV)
    return demo_model(choice) if choice else None
