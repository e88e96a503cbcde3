"""What the host tests share: a real ``threads serve`` process on loopback (``HostServer``),
the callers' tokens, and a reader of Server-Sent Events. ``stop`` ends the server with SIGTERM
(or SIGKILL) and ``start`` starts it again on the same store and port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).parent


def child_pythonpath() -> str:
    """A host or run process's PYTHONPATH: this directory (the agents), then the caller's own
    (a worktree's absolute ``src``), so the child imports the threads under test."""
    caller = os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(HERE), caller]) if caller else str(HERE)
TOKENS = {
    "alice-token": {"issuer": "test", "tenant": "acme", "subject": "alice"},
    "bob-token": {"issuer": "test", "tenant": "acme", "subject": "bob"},
    "eve-token": {"issuer": "test", "tenant": "evil", "subject": "eve"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class HostServer:
    store: Path
    tokens: Path
    service_port: int
    module: str = "host_agents:agents"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    clients: list[httpx.Client] = field(default_factory=list)
    argv: list[str] | None = None  # another server command than ``threads serve``
    options: list[str] = field(default_factory=list)  # more options of ``threads serve``
    stdout: str = ""  # what the last stopped process printed on stdout

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "THREADS_HOST_PORT": str(self.service_port),
               "PYTHONPATH": child_pythonpath(), **self.extra_env}
        argv = self.argv or [
            sys.executable, "-m", "threads.cli", "serve", self.module, "--store",
            str(self.store), "--port", str(self.port), "--tokens", str(self.tokens),
            "--grace-ms", "2000", *self.options,
        ]
        self.process = subprocess.Popen(
            argv,
            cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read() if self.process.stderr else b""
                raise RuntimeError(err.decode())
            try:
                httpx.get(self.url + "/openapi.json", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.05)  # the server is still binding its port
        raise RuntimeError("threads serve did not answer within 30 s")

    def stop(self, sig: int = signal.SIGTERM) -> str:
        assert self.process is not None
        self.process.send_signal(sig)
        out, err = self.process.communicate(timeout=60)
        self.process = None
        self.stdout = out.decode()
        return err.decode()

    def client(self, token: str | None = "alice-token") -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        self.clients.append(client)
        return client

    def close_clients(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()

def sse(client: httpx.Client, path: str, **headers: str) -> list[dict[str, Any]]:
    """Read a whole event stream: [{"id": seq|None, "data": {...}}, ...]."""
    out: list[dict[str, Any]] = []
    with client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        out.extend(parse_sse(response.iter_lines()))
    return out


def parse_sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    current: dict[str, Any] = {"id": None}
    for line in lines:
        if line.startswith("id: "):
            current["id"] = int(line[4:])
        elif line.startswith("data: "):
            current["data"] = json.loads(line[6:])
        elif line == "" and "data" in current:
            yield current
            current = {"id": None}
