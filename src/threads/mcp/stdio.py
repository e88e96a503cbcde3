"""A local MCP server as a child process, spoken to over its stdin and stdout.

The child gets exactly ``PATH`` and ``HOME`` from the host's environment plus the ``env`` given
for the server: nothing else of the host (API keys in the environment stay here). It runs in
its own session (process group) and writes one JSON-RPC message per line.

Invariants: the fence is checked right before each message is written to the child's stdin
(a refusal writes nothing and ends the connection); a line that is not a JSON-RPC message, or
longer than ``MAX_LINE_BYTES``, ends the connection (the calls waiting on it fail at once
instead of waiting for an answer that can't be read); closing always ends the child within
``STOP_GRACE_S`` after stdin closes, then SIGTERM, then SIGKILL to its process group, even when
the closing task is being cancelled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

import anyio
import mcp_types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from threads.models.fence import Fence

log = logging.getLogger("threads")
INHERITED = ("PATH", "HOME")
MAX_LINE_BYTES = 32 * 1024 * 1024
STOP_GRACE_S = 2.0


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``PATH`` and ``HOME`` from the host (those it has), then ``env`` over them."""
    base = {name: os.environ[name] for name in INHERITED if name in os.environ}
    return base | dict(env)


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str,
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    fence_of: Callable[[], Fence],
) -> AsyncIterator[TransportStreams]:
    """Start the child and yield the session's read and write streams."""
    process = await anyio.open_process(
        [command, *args],
        env=child_environment(env),
        cwd=cwd,
        stderr=None,  # the server's own log goes where this process's goes
        start_new_session=True,
    )
    incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read_lines, process, incoming_send)
            tasks.start_soon(_write_lines, process, outgoing_receive, incoming_send, fence_of)
            try:
                yield incoming, outgoing
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            for stream in (incoming, outgoing, incoming_send, outgoing_receive):
                await stream.aclose()
            await _stop(process)


async def _read_lines(
    process: Process, incoming: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    assert process.stdout is not None
    buffer = b""
    try:
        async for chunk in process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if len(buffer) > MAX_LINE_BYTES:
                log.warning("an MCP server wrote a line over %d bytes; closing", MAX_LINE_BYTES)
                return
            for line in lines:
                if not line.strip():
                    continue
                try:
                    message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError:
                    log.warning("an MCP server wrote a line that is not JSON-RPC; closing")
                    return
                await incoming.send(SessionMessage(message))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
        pass
    finally:
        # The session sees the end of its stream: every call still waiting fails now.
        await incoming.aclose()


async def _write_lines(
    process: Process,
    outgoing: MemoryObjectReceiveStream[SessionMessage],
    incoming: MemoryObjectSendStream[SessionMessage | Exception],
    fence_of: Callable[[], Fence],
) -> None:
    assert process.stdin is not None
    try:
        async for item in outgoing:
            # The last moment before the bytes leave: a run that lost its lease writes nothing.
            await fence_of().check()
            text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
            await process.stdin.send(text.encode("utf-8") + b"\n")
    except Exception as exc:  # a refusal, a closed pipe: this connection is over
        log.info("MCP stdio connection ends: %s", type(exc).__name__)
        await incoming.aclose()
        with contextlib.suppress(Exception):
            await process.stdin.aclose()


async def _stop(process: Process) -> None:
    """Close stdin, give the child ``STOP_GRACE_S`` to exit, then SIGTERM and SIGKILL its group."""
    if process.stdin is not None:
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        with anyio.move_on_after(STOP_GRACE_S):
            await process.wait()
        if process.returncode is not None:
            break
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                await stream.aclose()
    with contextlib.suppress(Exception), anyio.move_on_after(STOP_GRACE_S):
        await process.aclose()
