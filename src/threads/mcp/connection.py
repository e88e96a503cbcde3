"""One open session with one MCP server, for the length of a run (or of a ``check()``).

A background task owns the connection: it opens the transport (a child process over stdio, or
Streamable HTTP falling back to SSE), holds the SDK session, initializes it and lists the
server's tools (every page), then waits until ``close``. Owning it in one task keeps the SDK's
task groups and cancel scopes nested as they must be, whichever task calls tools meanwhile.

Invariants: every message the session sends passes the fence (``FencedWriteStream``, and again
where the transport sends it); setup is bounded by ``setup_timeout_s`` and a failure of any kind
is ``ConfigError("mcp_unreachable")`` naming the server, its secrets scrubbed; ``close`` always
ends the connection within a bound, even while the caller is being cancelled, and never raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import mcp_types
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError

from mcp import ClientSession
from threads.errors import ConfigError, StoreError
from threads.mcp.call import CONNECTION_CLOSED
from threads.mcp.config import McpConfig
from threads.mcp.fenced_stream import FencedWriteStream
from threads.mcp.remote import http_transport
from threads.mcp.secrets import shown_url
from threads.mcp.stdio import stdio_transport
from threads.models.fence import Fence
from threads.tools.encode import describe_exception

log = logging.getLogger("threads")
MAX_LIST_PAGES = 1000
CLOSE_BOUND_S = 40.0  # the stdio stop escalation, or one HTTP DELETE at its 30 s timeout


@dataclass(frozen=True, slots=True)
class Listing:
    """What the server offered when the connection opened."""

    tools: tuple[mcp_types.Tool, ...]
    resources: bool


@dataclass(frozen=True, slots=True)
class _Open:
    session: ClientSession
    listing: Listing


class Connection:
    def __init__(self, server: McpConfig, fence_of: Callable[[], Fence]) -> None:
        self._server = server
        self._fence_of = fence_of
        self._ready: asyncio.Future[_Open] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Listing:
        """Connect and list; ``ConfigError('mcp_unreachable')`` when that fails or takes longer
        than the server's ``setup_timeout_s``."""
        self._task = asyncio.create_task(self._own(), name=f"mcp:{self._server.name}")
        try:
            opened = await asyncio.wait_for(
                asyncio.shield(self._ready), self._server.setup_timeout_s
            )
        except TimeoutError:
            raise self._unreachable(
                f"it did not finish connecting within {self._server.setup_timeout_s:g} s"
            ) from None
        except StoreError:
            raise
        except ConfigError:
            raise
        except Exception as exc:
            raise self._unreachable(_described(exc)) from None
        return opened.listing

    @property
    def session(self) -> ClientSession:
        """The open session (only after ``start`` returned)."""
        return self._ready.result().session

    async def close(self) -> None:
        task = self._task
        if task is None:
            return
        if not self._serving():
            task.cancel()  # setup never finished: nothing to wind down politely
        self._closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_BOUND_S)
        except TimeoutError:
            task.cancel()
        except asyncio.CancelledError:
            task.cancel()  # its transport still stops the child (shielded, bounded)
            raise
        except Exception:  # noqa: S110 - closing never replaces the run's outcome
            pass

    def _serving(self) -> bool:
        ready = self._ready
        if not ready.done():
            return False
        if ready.cancelled():
            return False
        return ready.exception() is None

    async def _own(self) -> None:
        failures: list[str] = []
        for name, transport in self._transports():
            try:
                async with transport() as streams:
                    await self._serve(streams)
                    return
            except asyncio.CancelledError:
                raise
            except StoreError as exc:
                self._fail(exc)
                return
            except Exception as exc:
                if self._ready.done():
                    log.info("MCP server %s: connection ended: %s", self._server.name, exc)
                    return
                failures.append(f"{name}: {_described(exc)}" if name else _described(exc))
        self._fail(self._unreachable("; ".join(failures)))

    async def _serve(self, streams: TransportStreams) -> None:
        read, write = streams
        async with ClientSession(read, FencedWriteStream(write, self._fence_of)) as session:
            init = await session.initialize()
            tools = await _list_tools(session)
            listing = Listing(tools, init.capabilities.resources is not None)
            if not self._ready.done():
                self._ready.set_result(_Open(session, listing))
            await self._closing.wait()

    def _transports(
        self,
    ) -> list[tuple[str, Callable[[], AbstractAsyncContextManager[TransportStreams]]]]:
        server, fence_of = self._server, self._fence_of
        if server.command is not None:
            command = server.command

            def stdio() -> AbstractAsyncContextManager[TransportStreams]:
                return stdio_transport(command, server.args, server.env, server.cwd, fence_of)

            return [("", stdio)]
        url = server.url or ""

        def streamable() -> AbstractAsyncContextManager[TransportStreams]:
            return http_transport("streamable_http", url, server.headers, fence_of)

        def sse() -> AbstractAsyncContextManager[TransportStreams]:
            return http_transport("sse", url, server.headers, fence_of)

        return [("Streamable HTTP", streamable), ("SSE", sse)]

    def _fail(self, exc: BaseException) -> None:
        if not self._ready.done():
            self._ready.set_exception(exc)

    def _unreachable(self, why: str) -> ConfigError:
        server = self._server
        where = f"command {server.command!r}" if server.command else shown_url(server.url or "")
        return ConfigError(
            "mcp_unreachable",
            server.secrets.scrub_error(
                f"{server.label} ({where}) could not be reached: {why}. Check that it runs and"
                " answers MCP; the run did not start without its tools"
            ),
        )


def _described(exc: BaseException) -> str:
    """What went wrong, in words: the exceptions inside a task group's group, not the group."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_described(inner) for inner in exc.exceptions)
    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        return "the connection closed before the server answered (did it exit, or write"\
            " something other than JSON-RPC to its stdout?)"
    return describe_exception(exc)


async def _list_tools(session: ClientSession) -> tuple[mcp_types.Tool, ...]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tuple(tools)
    raise ValueError(f"its tool list did not end after {MAX_LIST_PAGES} pages")


@contextlib.asynccontextmanager
async def connected(
    server: McpConfig, fence_of: Callable[[], Fence]
) -> AsyncIterator[tuple[Connection, Listing]]:
    """A started ``Connection`` and what it listed, closed on exit."""
    connection = Connection(server, fence_of)
    try:
        listing = await connection.start()
        yield connection, listing
    finally:
        await connection.close()
