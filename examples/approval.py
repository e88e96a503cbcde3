"""An approval decided from a second process.

    python examples/approval.py

The agent's policy asks before any refund. The run parks (``awaiting_approval``) and returns; the
approver, in another process that has only the store and the thread id (no agent), reads what
is waiting, the tool and its arguments, and grants it. Running the thread again continues:
the refund runs once, with the arguments that were approved.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

from threads import (
    LOCAL_OPERATOR,
    Completed,
    Parked,
    Permissions,
    RunContext,
    agent,
    open_thread,
    sqlite,
    tool,
)
from threads.testing import call, say, scripted_model, use

APPROVER = "--approve"


@tool(effect="idempotent", dedup_window_ms=24 * 60 * 60 * 1000)
def refund(order_id: str, amount_cents: int, ctx: RunContext) -> str:
    """Refund an order."""
    return f"refunded {amount_cents} cents on order {order_id} (key {ctx.effect_key})"


bot = agent(
    name="support",
    model=scripted_model(
        [use(call("refund", order_id="42", amount_cents=3999)), say("Refunded.")]
    ),
    tools=[refund],
    permissions=Permissions(ask=["refund"]),
)


async def approve(store_dir: str, thread_id: str) -> None:
    """The approver's process: no agent, only the store and the thread id."""
    store = sqlite(store_dir)
    try:
        thread = await open_thread(store, thread_id)
        for pending in await thread.pending_approvals():
            print(f"approver: granting {pending.tool}({pending.input}) [{pending.args_hash}]")
            # the default run principal (the local operator) started the thread, so it decides
            await thread.approve(pending.challenge_id, LOCAL_OPERATOR, args_hash=pending.args_hash)
    finally:
        await store.close()


async def main(store_dir: str) -> int:
    store = sqlite(store_dir)
    try:
        parked = await bot.run("Refund order 42, please.", store=store)
        if not isinstance(parked, Parked):
            print(f"expected a park, the run ended {parked.status}", file=sys.stderr)
            return 1
        print(f"run: parked ({parked.reason}) on {[p.kind for p in parked.pending]}")
        await asyncio.to_thread(
            subprocess.run,
            [sys.executable, __file__, APPROVER, store_dir, parked.thread.id],
            check=True,
        )
        done = await bot.run(None, store=store, thread=parked.thread.id)
        if not isinstance(done, Completed):
            print(f"the rerun ended {done.status}", file=sys.stderr)
            return 1
        results = [e for e in await done.thread.timeline() if e.type == "tool_result"]
        print(f"rerun: {done.output} ({results[0].data['preview']})")
        return 0
    finally:
        await store.close()


if __name__ == "__main__":
    if sys.argv[1:2] == [APPROVER]:
        asyncio.run(approve(sys.argv[2], sys.argv[3]))
    else:
        with tempfile.TemporaryDirectory() as directory:
            sys.exit(asyncio.run(main(str(Path(directory)))))
