"""Drill fixtures (a fake service process per module) and the drill summary line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from drill_harness import SUMMARY

from threads.testing.fake_service import FakeService


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    svc = FakeService.start()
    try:
        yield svc
    finally:
        svc.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in SUMMARY:
        terminalreporter.write_line(line)
