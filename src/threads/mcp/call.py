"""Sending one request to an MCP server and saying honestly what became of it.

A ``tools/call`` (or ``resources/read``) either answers, and its answer is the result (the
server's ``isError`` makes it an error result), or it ends in one of these ways:

- the fence refused: ``StoreError('stale_epoch')`` goes up unchanged (nothing was sent);
- the server answered with a JSON-RPC error: a final error result ``error <code>: <message>``,
  except the SDK's own codes ``-32001`` (no answer in time) and ``-32000`` (the connection
  closed), which like any other failure after sending (a local timeout, a reply that can't be
  read, a transport error) raise ``EffectUnknown``: the server may have acted;
- the run was cancelled while waiting (``ctx.cancelled``): the request is abandoned and the
  call is in doubt too (``EffectUnknown``), since the server may already have acted.

Invariant: no text raised from here holds one of the server's secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TypeVar

import mcp_types
from mcp.shared.exceptions import MCPError

from mcp import ClientSession
from threads.errors import StoreError
from threads.mcp.config import McpConfig
from threads.mcp.render import untrusted
from threads.tools.encode import describe_exception
from threads.tools.tool import EffectUnknown

# The SDK raises these codes for its own local outcomes (mcp_types.REQUEST_TIMEOUT and
# CONNECTION_CLOSED), whichever side they came from.
NO_ANSWER_IN_TIME = -32001
CONNECTION_CLOSED = -32000
R = TypeVar("R", mcp_types.CallToolResult, mcp_types.ReadResourceResult)


class McpToolError(Exception):
    """The server answered, and its answer is an error (``isError``, or a JSON-RPC error)."""


async def answer_of(
    server: McpConfig,
    session: ClientSession,
    request: mcp_types.CallToolRequest | mcp_types.ReadResourceRequest,
    result_type: type[R],
    *,
    source_id: str,
    cancelled: asyncio.Event,
) -> R:
    """The server's answer to ``request`` (within the server's ``timeout_s``), or the outcome
    the module docstring describes."""
    label, timeout_s, secrets = server.label, server.timeout_s, server.secrets
    sending = asyncio.ensure_future(
        session.send_request(request, result_type, request_read_timeout_seconds=timeout_s)
    )
    waiting = asyncio.ensure_future(cancelled.wait())
    try:
        await asyncio.wait({sending, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
        if not sending.done():
            sending.cancel()
            with contextlib.suppress(BaseException):
                await sending
    if sending.cancelled():
        raise EffectUnknown(
            f"the run was cancelled before {label} answered; it may have acted", "timeout"
        )
    try:
        return sending.result()
    except StoreError:
        raise
    except MCPError as exc:
        if exc.code == NO_ANSWER_IN_TIME:
            raise EffectUnknown(
                f"{label} did not answer within {timeout_s:g} s; it may have acted", "timeout"
            ) from None
        if exc.code == CONNECTION_CLOSED:
            raise EffectUnknown(
                f"the connection to {label} closed before it answered; it may have acted",
                "transport_error",
            ) from None
        said = secrets.scrub(f"error {exc.code}: {exc.message}")
        raise McpToolError(untrusted(source_id, said, secrets)) from None
    except TimeoutError:
        raise EffectUnknown(
            f"{label} did not answer within {timeout_s:g} s; it may have acted", "timeout"
        ) from None
    except Exception as exc:
        what = secrets.scrub_error(describe_exception(exc))
        raise EffectUnknown(
            f"the request to {label} failed after it was sent ({what}); it may have acted",
            "transport_error",
        ) from None
