"""Host fixtures: one ``threads serve`` per test module on a fresh SQLite store (``server``;
``console_server`` serves the console tests' agents), with a fake service process for tools
that wait on a gate (``service``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from host_support import TOKENS, HostServer

from threads.testing.fake_service import FakeService


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    svc = FakeService.start()
    try:
        yield svc
    finally:
        svc.stop()


def _serving(
    tmp_path_factory: pytest.TempPathFactory, service: FakeService, module: str
) -> Iterator[HostServer]:
    root = tmp_path_factory.mktemp("host")
    tokens = root / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    srv = HostServer(root / "store", tokens, service.port, module=module)
    srv.start()
    try:
        yield srv
    finally:
        srv.close_clients()
        if srv.process is not None:
            srv.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, service: FakeService) -> Iterator[HostServer]:
    yield from _serving(tmp_path_factory, service, "host_agents:agents")


@pytest.fixture(scope="module")
def console_server(
    tmp_path_factory: pytest.TempPathFactory, service: FakeService
) -> Iterator[HostServer]:
    """``threads serve console_agents:agents``: the agents the console tests run."""
    yield from _serving(tmp_path_factory, service, "console_agents:agents")


@pytest.fixture(autouse=True)
def _close_clients(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("server", "console_server"):
        if name in request.fixturenames:
            request.getfixturevalue(name).close_clients()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for name in ("test_host_drill", "test_openapi_fuzz"):
        module = sys.modules.get(name)
        for line in getattr(module, "SUMMARY", []):
            terminalreporter.write_line(line)
