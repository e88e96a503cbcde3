"""Sandbox drill worker: one real agent with a real local sandbox, in its own process.

``python sandbox_worker.py SPEC`` runs ``Agent.run`` once and prints its outcome as a JSON line.
SPEC is JSON: ``store``, ``sandboxes`` (the local sandbox root), ``clock_file`` (a millisecond
offset the parent moves, so leases expire without sleeping), ``thread`` (id or null),
``input`` (text or null), ``script`` (``bash``, ``two_step`` or ``three``),
``kill_after_create`` (SIGKILL this process right after the provider created a sandbox, before
the ledger records it), ``kill_mid_create`` (SIGKILL it while the sandbox directory is half
made, right before it is renamed into place), ``fork`` (instead of a run: fork ``thread`` at
its first fork point; with ``kill_fork`` ``before_commit`` or ``after_commit`` this process
SIGKILLs itself right before or right after the transaction that writes the child's ``fork``
event and makes it ready).

The ``bash`` script asks for one command that appends a line to ``/workspace/runs`` (so a
re-run shows up as a second line), marks ``/workspace/started`` and sleeps; the ``two_step``
script calls a ``runs="sandbox"`` tool that runs a long command and then a second one, so a
holder frozen during the first can show whether the fence refuses the second; ``three`` runs
three short commands, each appending its own word, with a snapshot at the turn's end.
``shared``: the parent appends ``parent`` to ``/workspace/runs``, then spawns a clerk with
``isolation: shared_sandbox`` that appends ``child``, then runs the long command (``child2``
instead of ``start``) in the same sandbox; the parent then reads the file.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from threads import Principal, agent, open_thread, tool
from threads.sandbox import SandboxContext
from threads.sandbox.bubblewrap import LocalSandbox, local
from threads.sandbox.local_session import LocalSession
from threads.store.sqlite import sqlite
from threads.testing.scripted import call, say, scripted_model, use

STARTER = Principal(issuer="api", tenant="drill", subject="alice")
LEASE_TTL_MS = 5_000
THREE = ("one", "two", "three")
LONG_COMMAND = "echo start >> /workspace/runs; touch /workspace/started; sleep 60;" \
    " echo end >> /workspace/runs"


class OffsetClock:
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def now_ms(self) -> int:
        text = self.path.read_text().strip() if self.path.exists() else ""
        return time.time_ns() // 1_000_000 + int(text or 0)


class KillAfterCreate(LocalSandbox):
    async def create(self, operation_key: str, ctx: SandboxContext) -> LocalSession:
        session = await super().create(operation_key, ctx)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        return session


class Steps(BaseModel):
    label: str


async def two_step(args: Steps, ctx: Any) -> str:
    first = await ctx.sandbox.exec(["sh", "-c", LONG_COMMAND])
    code = await first.wait()
    second = await ctx.sandbox.exec(["sh", "-c", "touch /workspace/second"])
    await second.wait()
    return f"first exited {code}"


def kill_before_rename() -> None:
    """SIGKILL this process when a half-made sandbox directory is about to be renamed."""
    real = os.rename

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        if Path(src).name.startswith(".new-"):
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst, **kwargs)

    os.rename = rename  # type: ignore[assignment]


def build(spec: dict[str, Any]) -> Any:
    provider = local(spec["sandboxes"])
    if spec.get("kill_mid_create"):
        kill_before_rename()
    if spec.get("kill_after_create"):
        provider = KillAfterCreate(provider.root, provider.limits)
    if spec["script"] == "two_step":
        steps = tool(name="two_step", description="two commands", input=Steps,
                     execute=two_step, runs="sandbox", effect="sandbox_local")
        return agent(name="drill", model=scripted_model(
            [use(call("two_step", label="x")), say("done")]), tools=[steps], sandbox=provider)
    if spec["script"] == "three":
        steps = [use(call("bash", command=f"echo {word} >> /workspace/runs; sleep 0.4"))
                 for word in THREE]
        return agent(name="drill", model=scripted_model([*steps, say("done")]),
                     sandbox=provider, snapshots=True)
    if spec["script"] == "lent":
        clerk = agent(name="clerk", sandbox=provider, model=scripted_model([
            use(call("bash", command="echo child >> /workspace/runs")),
            use(call("bash", command=LONG_COMMAND.replace("echo start", "echo child2"))),
            say("child done"),
        ]))
        return agent(name="drill", sandbox=provider, subagents=[clerk], model=scripted_model([
            use(call("bash", command="echo parent >> /workspace/runs")),
            use(call("spawn_agent", agent="clerk", prompt="work", isolation="shared_sandbox")),
            use(call("read_file", path="/workspace/runs")),
            say("done"),
        ]))
    return agent(name="drill", model=scripted_model(
        [use(call("bash", command=LONG_COMMAND)), say("done")]), sandbox=provider)


def kill_at_fork_commit(store: Any, when: str) -> None:
    """SIGKILL this process at the fork's one durable boundary (before or after its commit)."""
    real = store.append

    async def append(branch_id: str, events: Any, **kwargs: Any) -> None:
        forking = any(e.type == "fork" for e in events)
        if forking and when == "before_commit":
            os.kill(os.getpid(), signal.SIGKILL)
        await real(branch_id, events, **kwargs)
        if forking and when == "after_commit":
            os.kill(os.getpid(), signal.SIGKILL)

    store.append = append


async def fork(spec: dict[str, Any], store: Any) -> dict[str, Any]:
    thread = await open_thread(store, spec["thread"])
    point = (await thread.fork_points())[0]
    if spec.get("kill_fork"):
        kill_at_fork_commit(store, spec["kill_fork"])
    child = await thread.fork(point.snapshot_event_id, local(spec["sandboxes"]))
    return {"status": "forked", "thread": spec["thread"], "child": child}


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    store = sqlite(spec["store"], clock=OffsetClock(spec["clock_file"]))
    try:
        if spec.get("fork"):
            return await fork(spec, store)
        result = await build(spec).run(
            spec.get("input"), thread=spec.get("thread"), store=store, principal=STARTER,
            lease_ttl_ms=LEASE_TTL_MS,
        )
        out: dict[str, Any] = {"status": result.status, "thread": result.thread.id}
        if result.status == "failed":
            out["error"] = result.error.code
        return out
    finally:
        await store.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))), flush=True)
