"""Crash and resume: a worker process is killed (SIGKILL) in the middle of a charge; running
the same thread again continues it, and the charge is not applied twice.

    python examples/crash_and_resume.py

The worker runs the agent in a child process. Its ``charge_card`` tool applies the charge to a
ledger (a file standing in for a payment provider that deduplicates on an idempotency key) and
then hangs, so the parent kills it after the charge happened but before threads recorded that it
finished. The parent then runs the thread again: recovery finds the charge in doubt, and because
the tool is ``idempotent`` it resends it with the same ``effect_key``, which the provider
recognises. POSIX only (it uses SIGKILL).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from threads import Agent, Completed, Failed, RunContext, agent, sqlite, tool
from threads.testing import call, say, scripted_model, use

WORKER = "--worker"
LEDGER = "ledger.txt"
LEASE_TTL_MS = 1_000  # how soon another process may take over from a dead worker


def charge_once(ledger: Path, key: str, amount_cents: int) -> None:
    """The provider's side: a key it has seen before changes nothing."""
    seen = ledger.read_text().split() if ledger.exists() else []
    if key not in seen:
        with ledger.open("a") as out:
            out.write(f"{key} {amount_cents}\n")


def make_bot(store_dir: Path, *, hang_after_charge: bool) -> Agent:
    @tool(effect="idempotent", dedup_window_ms=24 * 60 * 60 * 1000)
    def charge_card(amount_cents: int, ctx: RunContext) -> str:
        """Charge the customer's card."""
        charge_once(store_dir / LEDGER, ctx.effect_key, amount_cents)
        if hang_after_charge:
            print("charged", flush=True)  # tell the parent: kill me now
            threading.Event().wait()
        return f"charged {amount_cents}"

    script = [use(call("charge_card", amount_cents=1250)), say("Charged 12.50.")]
    return agent(name="billing", model=scripted_model(script), tools=[charge_card])


async def worker(store_dir: Path) -> None:
    bot = make_bot(store_dir, hang_after_charge=True)
    store = sqlite(store_dir)
    await bot.run("Charge 12.50 for order 42.", store=store, lease_ttl_ms=LEASE_TTL_MS)


async def resume(store_dir: Path) -> int:
    store = sqlite(store_dir)
    try:
        [thread] = await store.list_threads()
        bot = make_bot(store_dir, hang_after_charge=False)
        for _ in range(50):
            result = await bot.run(None, store=store, thread=thread.thread_id)
            if not (isinstance(result, Failed) and result.error.code == "branch_busy"):
                break
            await asyncio.sleep(0.1)  # the dead worker's lease has not expired yet
        if not isinstance(result, Completed):
            print(f"the rerun ended {result.status}", file=sys.stderr)
            return 1
        print(f"rerun: {result.output}")
        for event in await result.thread.timeline():
            print(f"  {event.seq:>2} {event.type:<22} {event.actor['kind']}")
        charges = (store_dir / LEDGER).read_text().splitlines()
        print(f"charges applied: {len(charges)}")
        return 0 if len(charges) == 1 else 1
    finally:
        await store.close()


def main(store_dir: Path) -> int:
    child = subprocess.Popen(
        [sys.executable, __file__, WORKER, str(store_dir)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "charged":
        print("the worker did not reach the charge", file=sys.stderr)
        return 1
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    print(f"worker {child.pid} killed mid-charge")
    return asyncio.run(resume(store_dir))


if __name__ == "__main__":
    if sys.argv[1:2] == [WORKER]:
        asyncio.run(worker(Path(sys.argv[2])))
    else:
        with tempfile.TemporaryDirectory() as directory:
            sys.exit(main(Path(directory)))
