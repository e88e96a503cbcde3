"""MCP test fixtures: the fake service (counting applications per effect key) in its own
process, shared by the module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from threads.testing.fake_service import FakeService

sys.path.insert(0, str(Path(__file__).parent))  # harness.py, beside the tests


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    with FakeService.running() as svc:
        yield svc
