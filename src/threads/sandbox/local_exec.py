"""A running command of the local sandbox: its output drained as it arrives, its deadline kept.

Past its deadline a command is stopped with the same proof recovery uses (``prove_gone``) and
``wait`` raises ``timeout``; when it ends by itself its record is marked ``exited`` with the
code, so a later ``terminate`` answers ``already_exited``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from threads.sandbox.limits import remove_cgroup
from threads.sandbox.protocol import ExecResult, SandboxError
from threads.sandbox.supervisor import Record, Records, prove_gone

OUTPUT_CAP = 4 * 1024 * 1024  # bytes kept per stream; a command may write more, it is dropped


class LocalExec:
    """A running local command; its output is drained into buffers as it arrives."""

    def __init__(
        self,
        records: Records,
        record: Record,
        *,
        process: asyncio.subprocess.Process,
        group: Path | None,
        timeout_ms: int,
        stdin: bytes | None,
    ) -> None:
        self._records = records
        self._record = record
        self._process = process
        self._group = group
        self._deadline_s = timeout_ms / 1000
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._queues: tuple[asyncio.Queue[bytes | None], asyncio.Queue[bytes | None]] = (
            asyncio.Queue(),
            asyncio.Queue(),
        )
        assert process.stdout is not None
        assert process.stderr is not None
        self._readers = [
            asyncio.create_task(_drain(process.stdout, self._out, self._queues[0])),
            asyncio.create_task(_drain(process.stderr, self._err, self._queues[1])),
            asyncio.create_task(_feed(process, stdin)),
        ]
        self._exit: int | None = None

    async def _stream(self, index: int) -> AsyncIterator[bytes]:
        queue = self._queues[index]
        while (chunk := await queue.get()) is not None:
            yield chunk

    def stdout(self) -> AsyncIterator[bytes]:
        return self._stream(0)

    def stderr(self) -> AsyncIterator[bytes]:
        return self._stream(1)

    async def wait(self) -> int:
        if self._exit is not None:
            return self._exit
        try:
            code = await asyncio.wait_for(self._process.wait(), self._deadline_s)
        except TimeoutError:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, prove_gone, self._record)
            await self._finish()
            raise SandboxError(
                "timeout",
                f"the command ran past {self._deadline_s:g} s and was stopped; it may have"
                " partly run",
            ) from None
        await self._finish()
        with contextlib.suppress(OSError):  # a sandbox deleted underneath keeps no records
            self._records.write(replace(self._record, state="exited", exit_code=code))
        self._exit = code
        return code

    async def _finish(self) -> None:
        await asyncio.gather(*self._readers, return_exceptions=True)
        remove_cgroup(self._group)

    async def collect(self) -> ExecResult:
        code = await self.wait()
        return ExecResult(code, b"".join(self._out), b"".join(self._err))


async def _drain(
    stream: asyncio.StreamReader, into: list[bytes], queue: asyncio.Queue[bytes | None]
) -> None:
    kept = 0
    while chunk := await stream.read(65536):
        if kept < OUTPUT_CAP:
            into.append(chunk[: OUTPUT_CAP - kept])
            kept += len(into[-1])
        queue.put_nowait(chunk)
    queue.put_nowait(None)


async def _feed(process: asyncio.subprocess.Process, stdin: bytes | None) -> None:
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if stdin:
            process.stdin.write(stdin)
            await process.stdin.drain()
        process.stdin.close()
