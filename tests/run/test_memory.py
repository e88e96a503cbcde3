"""Memory adapters whose traffic can't pass the fence are refused at setup."""

from __future__ import annotations

import pytest

from threads import ConfigError, agent
from threads.memory import mem0
from threads.testing.scripted import say, scripted_model


def test_mem0_is_refused_at_setup() -> None:
    with pytest.raises(ConfigError) as refused:
        mem0(api_key="m0-secret")
    assert refused.value.code == "transport_fence_unsupported"
    assert "m0-secret" not in str(refused.value)


def test_a_memory_adapter_that_does_not_declare_the_fence_is_refused() -> None:
    class Unfenced:
        pass

    with pytest.raises(ConfigError) as refused:
        agent(name="t", model=scripted_model([say("hi")]), memory=Unfenced())
    assert refused.value.code == "transport_fence_unsupported"
