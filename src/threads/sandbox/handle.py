"""``SandboxHandle``: a run's sandbox as one tool call sees it (``ctx.sandbox``).

Every call goes to the run's sandbox session through the run's fence. Commands started through
a handle are keyed by the call's effect key (the first as the key itself, later ones as
``<key>#<n>``), so recovery can prove every one of them gone (``terminate_all``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from threads.sandbox.protocol import (
    DEFAULT_TIMEOUT_MS,
    WORKSPACE,
    ExecOutput,
    FileEntry,
    SandboxContext,
    SandboxError,
    SandboxSession,
    Termination,
)

MAX_COMMANDS_PER_CALL = 64


def process_keys(effect_key: str) -> list[str]:
    """Every key a call's commands can have run under."""
    return [effect_key, *(f"{effect_key}#{n}" for n in range(1, MAX_COMMANDS_PER_CALL))]


@dataclass(frozen=True, slots=True)
class SandboxHandle:
    session_of: Callable[[], Awaitable[SandboxSession]]
    ctx: SandboxContext
    effect_key: str
    _started: list[int] = field(default_factory=lambda: [0])

    def _next_key(self) -> str:
        n = self._started[0]
        if n >= MAX_COMMANDS_PER_CALL:
            raise SandboxError("too_large", f"one call may run at most {n} commands")
        self._started[0] = n + 1
        return process_keys(self.effect_key)[n]

    async def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: str = WORKSPACE,
        env: Mapping[str, str] | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        stdin: bytes | None = None,
    ) -> ExecOutput:
        session = await self.session_of()
        return await session.exec(
            argv, self.ctx, process_key=self._next_key(), cwd=cwd, env=env,
            timeout_ms=timeout_ms, stdin=stdin,
        )

    async def terminate(self) -> Termination:
        """Stop every command this call started and prove them gone (``unknown`` if not)."""
        return await terminate_all(await self.session_of(), self.effect_key, self.ctx)

    async def read_file(self, path: str) -> bytes:
        return await (await self.session_of()).read_file(path, self.ctx)

    async def write_file(self, path: str, data: bytes) -> None:
        await (await self.session_of()).write_file(path, data, self.ctx)

    async def list_files(self, path: str = WORKSPACE) -> list[FileEntry]:
        return await (await self.session_of()).list_files(path, self.ctx)


async def terminate_all(
    session: SandboxSession, effect_key: str, ctx: SandboxContext
) -> Termination:
    """Prove every command of one call gone: ``unknown`` if any one can't be."""
    answers = [await session.terminate(key, ctx) for key in process_keys(effect_key)]
    if "unknown" in answers:
        return "unknown"
    return "terminated" if "terminated" in answers else "already_exited"
