"""The public test kit: ``scripted_model`` (a deterministic model that plays a script of
replies; ``say``, ``use``, ``call``, ``rate_limited``, ``overloaded`` and ``server_error`` build
the script), ``FakeClock`` lives in ``threads.clock``, and ``threads.testing.fake_providers``
serves fake OpenAI and Anthropic endpoints on loopback.
"""

from threads.testing.scripted import (
    Reply,
    ScriptedModel,
    ScriptError,
    call,
    overloaded,
    rate_limited,
    say,
    scripted_model,
    server_error,
    use,
)

__all__ = [
    "Reply",
    "ScriptError",
    "ScriptedModel",
    "call",
    "overloaded",
    "rate_limited",
    "say",
    "scripted_model",
    "server_error",
    "use",
]
