"""The built-in sandbox tools an agent with ``sandbox=`` gets: ``bash``, ``read_file``,
``write_file``, ``list_files``.

All four run inside the run's sandbox with effect ``sandbox_local``: a call a crash or a timeout
left in doubt is settled by proving its processes gone (``interrupted``), never by running it
again. A timeout or a lost answer is raised as ``EffectUnknown`` (uncertainty, not a plain
error); any other sandbox error is an ordinary error result the model can read.

Nothing here waits without a bound: a command by its ``timeout_ms``, a file call by the
sandbox's own bound. A command also stops when the run is cancelled (``ctx.cancelled``, set by
Ctrl-C or a cancel another process queued): its processes are proven gone and the call ends
with an error result saying it may have partly run (``CommandStopped``), or, when they can't be
proven gone, in doubt.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from threads.errors import ConfigError
from threads.sandbox.handle import SandboxHandle
from threads.sandbox.protocol import (
    DEFAULT_TIMEOUT_MS,
    WORKSPACE,
    ExecOutput,
    ExecResult,
    SandboxError,
)
from threads.tools.tool import EffectUnknown, RunContext, Tool, tool

OUTPUT_SHOWN = 32 * 1024  # bytes of each stream the model sees
MAX_TIMEOUT_MS = 60 * 60 * 1000


class Bash(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1, description="A bash command, run in /workspace.")
    timeout_ms: int = Field(default=DEFAULT_TIMEOUT_MS, ge=1, le=MAX_TIMEOUT_MS)


class ReadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="An absolute path under /workspace.")


class WriteFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="An absolute path under /workspace.")
    content: str


class ListFiles(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(default=WORKSPACE, description="A directory under /workspace.")


def _sandbox(ctx: RunContext) -> SandboxHandle:
    if ctx.sandbox is None:
        raise ConfigError("invalid_config", "this run has no sandbox; pass agent(sandbox=...)")
    return ctx.sandbox


def _uncertain(exc: SandboxError) -> Exception:
    if exc.code == "timeout":
        return EffectUnknown(exc.message, "timeout")
    if exc.code == "unavailable":
        return EffectUnknown(exc.message, "transport_error")
    return exc


def _shown(data: bytes) -> str:
    text = data[:OUTPUT_SHOWN].decode("utf-8", errors="replace")
    if len(data) > OUTPUT_SHOWN:
        text += f"\n[{len(data) - OUTPUT_SHOWN} more bytes not shown]"
    return text


class CommandStopped(Exception):  # noqa: N818 - it names what happened to the command
    """The run was cancelled while the command ran; it was stopped and proven gone."""


async def _bash(args: Bash, ctx: RunContext) -> str:
    handle = _sandbox(ctx)
    try:
        run = await handle.exec(["/bin/bash", "-c", args.command], timeout_ms=args.timeout_ms)
        result = await _unless_cancelled(run, ctx.cancelled, handle)
    except SandboxError as exc:
        raise _uncertain(exc) from exc
    parts = [f"exit code {result.exit_code}"]
    if result.stdout:
        parts.append("stdout:\n" + _shown(result.stdout))
    if result.stderr:
        parts.append("stderr:\n" + _shown(result.stderr))
    return "\n".join(parts)


async def _unless_cancelled(
    run: ExecOutput, cancelled: asyncio.Event, handle: SandboxHandle
) -> ExecResult:
    """The command's result, or, once ``cancelled`` is set first, the command stopped."""
    collect = asyncio.ensure_future(run.collect())
    stop = asyncio.ensure_future(cancelled.wait())
    try:
        await asyncio.wait({collect, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if collect.done():
        return collect.result()
    answer = await handle.terminate()
    collect.cancel()
    with contextlib.suppress(asyncio.CancelledError, SandboxError):
        await collect
    if answer == "unknown":
        raise EffectUnknown(
            "the run was cancelled and the command could not be proven stopped",
            "transport_error",
        )
    raise CommandStopped(
        "the run was cancelled: the command was stopped before it finished; it may have"
        " partly run"
    )


async def _read_file(args: ReadFile, ctx: RunContext) -> str:
    try:
        return _shown(await _sandbox(ctx).read_file(args.path))
    except SandboxError as exc:
        raise _uncertain(exc) from exc


async def _write_file(args: WriteFile, ctx: RunContext) -> str:
    data = args.content.encode("utf-8")
    try:
        await _sandbox(ctx).write_file(args.path, data)
    except SandboxError as exc:
        raise _uncertain(exc) from exc
    return f"wrote {len(data)} bytes to {args.path}"


async def _list_files(args: ListFiles, ctx: RunContext) -> str:
    try:
        entries = await _sandbox(ctx).list_files(args.path)
    except SandboxError as exc:
        raise _uncertain(exc) from exc
    lines = [
        e.path + ("/" if e.kind == "dir" else f" ({e.size} bytes)" if e.kind == "file" else "")
        for e in entries
    ]
    return "\n".join(lines) if lines else f"{args.path} is empty"


def sandbox_tools(*, enforced: bool = True) -> tuple[Tool, ...]:
    """The four tools. Where the sandbox can't block the network, a command may act beyond it,
    so they are ``unguarded`` (an in-doubt call parks) instead of ``sandbox_local``."""
    def make(
        name: str,
        description: str,
        model: type[BaseModel],
        execute: Callable[[Any, RunContext], Awaitable[str]],
    ) -> Tool:
        return tool(
            name=name, description=description, input=model, execute=execute,
            runs="sandbox", effect="sandbox_local" if enforced else "unguarded",
        )

    return (
        make("bash", "Run a bash command in the sandbox (cwd /workspace, no network).",
             Bash, _bash),
        make("read_file", "Read a text file of the sandbox workspace.", ReadFile, _read_file),
        make("write_file", "Write a text file in the sandbox workspace (parents are made).",
             WriteFile, _write_file),
        make("list_files", "List the files under a directory of the sandbox workspace.",
             ListFiles, _list_files),
    )

