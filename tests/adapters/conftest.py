"""Fixtures for adapter tests: no real network, fake providers on loopback, a fixed request.

``block_real_network`` is autouse: any connection or name lookup for a host other than loopback
raises, so a test can never reach a real provider even if an adapter ignored its base_url.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from threads.adapters.base import SdkModel
from threads.testing.fake_providers import AnthropicFake, OpenAIFake

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True)
def block_real_network(monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOOPBACK:
            raise OSError(f"test blocked a real network connection to {address!r}")
        return real_connect(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host  # httpcore passes bytes
        if name not in _LOOPBACK and name is not None:
            raise OSError(f"test blocked a real name lookup of {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)


@pytest.fixture
async def openai_fake() -> AsyncIterator[OpenAIFake]:
    async with OpenAIFake() as fake:
        yield fake


@pytest.fixture
async def anthropic_fake() -> AsyncIterator[AnthropicFake]:
    async with AnthropicFake() as fake:
        yield fake


@pytest.fixture
async def models() -> AsyncIterator[list[SdkModel]]:
    """Models a test builds; their SDK clients are closed when the test ends."""
    built: list[SdkModel] = []
    yield built
    for model in built:
        await model.aclose()


@pytest.fixture(params=[True, False], ids=["streaming", "plain"])
def streaming(request: pytest.FixtureRequest) -> bool:
    flag: bool = request.param
    return flag
