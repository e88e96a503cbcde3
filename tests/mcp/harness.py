"""Starting the test MCP server (``counting_server.py``) for a test: as a stdio child of the
run (an ``mcp(command=...)``), or as its own HTTP process on a loopback port."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from threads.mcp import McpServer, mcp

SERVER = Path(__file__).with_name("counting_server.py")
RAW_SERVER = Path(__file__).with_name("raw_server.py")
READY_TIMEOUT_S = 30.0


def stdio(service_port: int, *, name: str = "counting", **options: Any) -> McpServer:
    spec = {"transport": "stdio", "service_port": service_port}
    spec.update(options.pop("spec", {}))
    return mcp(name=name, command=sys.executable, args=[str(SERVER), json.dumps(spec)], **options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_process(service_port: int, transport: str, **spec: Any) -> Iterator[str]:
    """A server process on loopback; yields its MCP URL (``/mcp``, or ``/sse`` for SSE)."""
    port = free_port()
    full = {"transport": transport, "port": port, "service_port": service_port, **spec}
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), json.dumps(full)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(proc, port)
        path = "/sse" if transport == "sse" else "/mcp"
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the MCP test server exited ({proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)  # a port opening, not a lease: nothing else to wait on
    raise RuntimeError("the MCP test server did not listen in time")
