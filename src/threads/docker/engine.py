"""A small client of the Docker Engine API over its unix socket, sent through the fence.

Every request goes through ``threads.models.fence.FencedTransport``: the fence of the sandbox
operation in progress (bound with ``operation(ctx)``, a ContextVar) is awaited before any byte
is written to the socket, and a request made outside any operation is refused. Every request is
bounded (``REQUEST_S`` without a byte: ``unavailable``) but a command's output stream, which
its caller bounds by the command's deadline; a body is read whole only up to a cap. Only the calls
the Docker sandbox needs are here; each answers the Engine API's JSON, or raises
``SandboxError`` with the code the sandbox protocol uses (``not_found``, ``unavailable``, ...).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from threads.errors import StoreError
from threads.models.fence import FencedTransport
from threads.sandbox.protocol import SandboxContext, SandboxError

API_VERSION = "v1.41"  # Docker 20.10 (Debian bookworm's docker.io) and newer
REQUEST_S = 60.0
_CURRENT: ContextVar[SandboxContext | None] = ContextVar("threads_docker_operation", default=None)


def socket_path() -> Path:
    """``DOCKER_HOST`` (only ``unix://``), then the usual socket locations."""
    host = os.environ.get("DOCKER_HOST", "")
    if host:
        if not host.startswith("unix://"):
            from threads.errors import ConfigError

            raise ConfigError(
                "transport_fence_unsupported",
                f"DOCKER_HOST={host!r}: threads speaks to Docker only over a unix socket",
            )
        return Path(host[len("unix://") :])
    for candidate in (Path("/var/run/docker.sock"), Path.home() / ".docker/run/docker.sock"):
        if candidate.exists():
            return candidate
    return Path("/var/run/docker.sock")


@contextlib.contextmanager
def operation(ctx: SandboxContext) -> Iterator[None]:
    """Bind ``ctx``'s fence to every Engine request made inside the block."""
    token = _CURRENT.set(ctx)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class _OperationFence:
    async def check(self) -> None:
        ctx = _CURRENT.get()
        if ctx is None:
            raise StoreError(
                "stale_epoch", "a Docker request outside any sandbox operation is never sent"
            )
        await ctx.fence()


_FENCE = _OperationFence()


class Engine:
    def __init__(self, socket: Path) -> None:
        inner = httpx.AsyncHTTPTransport(uds=str(socket), retries=0)
        self._client = httpx.AsyncClient(
            transport=FencedTransport(lambda: _FENCE, inner),
            base_url=f"http://docker/{API_VERSION}",
            timeout=httpx.Timeout(REQUEST_S),
        )

    async def request(
        self, method: str, path: str, *, json: Any = None, content: bytes | None = None,
        params: dict[str, str] | None = None, ok: tuple[int, ...] = (200, 201, 204),
    ) -> httpx.Response:
        headers = {"Content-Type": "application/x-tar"} if content is not None else None
        try:
            response = await self._client.request(
                method, path, json=json, content=content, params=params, headers=headers
            )
        except httpx.TransportError as exc:
            raise SandboxError("unavailable", f"the Docker engine did not answer: {exc}") from exc
        if response.status_code not in ok:
            raise _error(response)
        return response

    async def read_capped(
        self, path: str, *, params: dict[str, str], cap: int
    ) -> tuple[bytes, bool]:
        """GET ``path``'s body, at most ``cap`` bytes; True with it when there was more."""
        chunks: list[bytes] = []
        kept = 0
        try:
            async with self._client.stream("GET", path, params=params) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise _error(response)
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk[: cap + 1 - kept])
                    kept += len(chunks[-1])
                    if kept > cap:
                        return b"".join(chunks)[:cap], True
        except httpx.TransportError as exc:
            raise SandboxError("unavailable", f"the Docker engine did not answer: {exc}") from exc
        return b"".join(chunks), False

    async def stream(self, path: str, body: Any) -> AsyncIterator[tuple[int, bytes]]:
        """POST ``path`` and yield ``(stream, chunk)`` frames of a non-tty exec (1 stdout,
        2 stderr) as they arrive (no read timeout: the command's deadline bounds it)."""
        unbounded_read = httpx.Timeout(REQUEST_S, read=None)
        try:
            async with self._client.stream(
                "POST", path, json=body, timeout=unbounded_read
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise _error(response)
                buffer = b""
                async for chunk in response.aiter_raw():
                    buffer += chunk
                    while len(buffer) >= 8:
                        kind, size = struct.unpack(">BxxxL", buffer[:8])
                        if len(buffer) < 8 + size:
                            break
                        yield kind, buffer[8 : 8 + size]
                        buffer = buffer[8 + size :]
        except httpx.TransportError as exc:
            raise SandboxError("unavailable", f"the Docker engine stream broke: {exc}") from exc

    async def close(self) -> None:
        await self._client.aclose()


def quoted(name: str) -> str:
    return quote(name, safe="")


def _error(response: httpx.Response) -> SandboxError:
    try:
        message = str(response.json().get("message", ""))
    except ValueError:
        message = response.text[:200]
    status = response.status_code
    if status == 404:
        return SandboxError("not_found", f"Docker: {message}")
    if status in (401, 403):
        return SandboxError("permission_denied", f"Docker: {message}")
    if status >= 500:
        return SandboxError("unavailable", f"Docker answered {status}: {message}")
    return SandboxError("invalid_path", f"Docker refused the request ({status}): {message}")
