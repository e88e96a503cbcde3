"""What the console tests share: a library run of ``console_agents`` in its own process on the
store a test host serves (``library_run``), and the end of it (``finished``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from host_support import HostServer, child_pythonpath

HERE = Path(__file__).parent


def library_run(server: HostServer, agent: str, text: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``agent`` on ``text`` as alice in another process; returns it and the thread id
    (printed by the run as soon as its first event is committed)."""
    env = {**os.environ, "THREADS_HOST_PORT": str(server.service_port),
           "PYTHONPATH": child_pythonpath()}
    process = subprocess.Popen(
        [sys.executable, str(HERE / "console_run.py"), str(server.store), agent, text],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    if not first.startswith("thread "):
        _, err = process.communicate(timeout=60)
        raise RuntimeError(f"the library run failed: {first}{err}")
    return process, first.split()[1]


def finished(process: subprocess.Popen[str]) -> str:
    """Wait for the run's process; its result status."""
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out.strip().rsplit(" ", 1)[-1]


def run_to_rest(server: HostServer, agent: str, text: str) -> str:
    """A whole library run in another process (it parks or ends); the thread id."""
    process, thread_id = library_run(server, agent, text)
    finished(process)
    return thread_id
