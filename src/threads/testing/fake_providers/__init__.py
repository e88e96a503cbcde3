"""Fake model providers on loopback for testing adapters through the official SDKs.

``OpenAIFake`` (Responses + Chat Completions) and ``AnthropicFake`` (Messages) speak the real JSON
and SSE wire formats, answer from a script of provider-neutral replies, and record every request
and every accepted TCP connection. Nothing here touches a real network.
"""

from __future__ import annotations

from threads.testing.fake_providers.anthropic_fake import AnthropicFake
from threads.testing.fake_providers.openai_fake import OpenAIFake
from threads.testing.fake_providers.provider import FakeProvider
from threads.testing.fake_providers.script import (
    ScriptedError,
    ScriptedMalformed,
    ScriptedStall,
    ScriptedToolCall,
    ScriptedTurn,
    ScriptedUsage,
)
from threads.testing.fake_providers.server import RecordedRequest
from threads.testing.fake_providers.threaded import FakeInThread

__all__ = [
    "AnthropicFake",
    "FakeInThread",
    "FakeProvider",
    "OpenAIFake",
    "RecordedRequest",
    "ScriptedError",
    "ScriptedMalformed",
    "ScriptedStall",
    "ScriptedToolCall",
    "ScriptedTurn",
    "ScriptedUsage",
]
