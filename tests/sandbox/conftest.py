"""Sandbox fixtures: a local sandbox provider under the test's own directory.

Tests that need bubblewrap skip (saying why) on a machine without it; everything else about the
sandbox is exercised for real: real namespaces, real processes, real files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from threads.sandbox.bubblewrap import BWRAP, LocalSandbox, local


@pytest.fixture
def provider(tmp_path: Path) -> LocalSandbox:
    if not os.access(BWRAP, os.X_OK):
        pytest.skip(f"bubblewrap is not installed at {BWRAP} (apt-get install bubblewrap)")
    return local(tmp_path / "sandboxes", cpu_seconds=20, memory_mb=512, pids=64)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    drills = sys.modules.get("test_sandbox_drills")
    if drills is not None and any(drills.FIGURES.values()):
        figures = ", ".join(f"{k} {v}" for k, v in drills.FIGURES.items())
        terminalreporter.write_line(f"sandbox drills: {figures}")
