"""The demo's narrative: the parent process starts workers, kills one on purpose, and walks a
newcomer through recovery, the parked email, the operator's decision and the finished run. Every
figure it prints is read back from the store or from the fake service, and nothing in it assumes
the order of the calls: with ``--model`` a real model decides them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

from threads import Principal, open_thread, sqlite
from threads.cli.hints import command, quoted
from threads.demo.models import MODEL_ENV
from threads.demo.service import DemoService
from threads.demo.support import KILL_ENV, REQUEST
from threads.log.json_types import JsonObject
from threads.log.lines import Event
from threads.log.vocabulary import data_of
from threads.store.sqlite import SQLiteStore

OPERATOR = Principal(issuer="api", tenant="local", subject="operator")


class WorkerOutcome(TypedDict):
    """The last line a demo worker prints (``threads.demo.worker``), or its failure."""

    status: str
    thread: NotRequired[str]
    reason: NotRequired[str]
    pending: NotRequired[list[list[str]]]  # [kind, id] per park
    output: NotRequired[object]
    error: NotRequired[str]
    stderr: NotRequired[str]


def _worker(
    store_dir: Path, service: Path, thread_id: str | None, *, kill: bool, model: str | None
) -> WorkerOutcome | None:
    env = dict(os.environ)
    env[KILL_ENV] = "1" if kill else "0"
    env.pop(MODEL_ENV, None)
    if model is not None:
        env[MODEL_ENV] = model
    argv = [sys.executable, "-m", "threads.demo.worker", str(store_dir), str(service)]
    if thread_id is not None:
        argv.append(thread_id)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        if proc.returncode == -9:
            return None
        return {"status": "error", "stderr": proc.stderr[-2000:]}
    outcome: WorkerOutcome = json.loads(proc.stdout.strip().splitlines()[-1])
    return outcome


async def _story(
    root: Path, say: Callable[[str], None], model: str | None, *, kept: bool = True
) -> int:
    store_dir, service_path = root / "store", root / "service.db"
    service = DemoService(service_path)
    say("threads demo: a billing agent whose worker dies mid-run, on a real SQLite store.")
    say(f"Model: {model} (it decides the calls)\n" if model else "Model: scripted (no API key)\n")
    say(f"Request: {REQUEST!r}\n")

    say("1. A worker process runs the thread: the model asks for a refund, a charge and an")
    say("   email to the customer...")
    earlier = await _thread_ids(store_dir)
    first = _worker(store_dir, service_path, None, kill=True, model=model)
    if first is not None:
        say(f"   unexpected: the worker finished ({first}); the demo expected to kill it")
        return 1
    store = sqlite(store_dir)
    try:
        [root_branch] = [b for b in await store.list_threads() if b.thread_id not in earlier]
        thread_id, branch_id = root_branch.thread_id, root_branch.branch_id
        c = service.counters(branch_id)
        say("   ...and is killed (SIGKILL) right after the mail server accepted the email,")
        say("   before threads could record that it was sent.")
        say(
            f"   The service says: {c.refunds} refund, {c.charges} charge, {c.emails} email sent.\n"
        )
        say(f"   The dead worker's lease is still live ({await _lease_left(store, branch_id)}),")
        say("   but it was held by a process of this machine that no longer exists, so the")
        say("   next run takes the thread over at once (a live holder, or one on another")
        say("   machine, would get branch_busy until its lease expires).\n")

        say("2. A new worker runs the same thread again. Recovery runs first:")
        second = _worker(store_dir, service_path, thread_id, kill=False, model=model)
        if second is None or second["status"] != "parked":
            say(f"   unexpected outcome: {second}")
            return 1
        thread = await open_thread(store, thread_id)
        finished = _finished_calls(await thread.timeline())
        if finished:
            say(f"   - {', '.join(finished)}: recorded as finished, nothing to redo;")
        say("   - send_email began but never recorded its outcome. It is unguarded (plain mail")
        say("     can't be deduplicated or looked up), so threads can't prove whether it went out.")
        say(f"   So it does not guess: the run is PARKED ({second['reason']})")
        for kind, effect_key in second["pending"]:
            say(f"   on {kind} {effect_key}.")
        say("")

        say("3. An operator checks the mail server's log and decides:")
        for _kind, effect_key in second["pending"]:
            sent = service.email_sent(effect_key)
            decision: Literal["assume_done", "assume_not_done"] = (
                "assume_done" if sent else "assume_not_done"
            )
            await thread.resolve_parked(effect_key, decision, OPERATOR)
            say(f"   the email {'went out' if sent else 'never went out'}, so the"
                f" {OPERATOR.subject} resolves it {decision}; from a shell that is")
            flag = "--assume-done" if sent else "--assume-not-done"
            shell = command("resolve", thread_id, effect_key, flag, "--store", str(store_dir))
            say(f"      {shell}")
        say("   The decision is recorded in the log with the operator as its actor.\n")

        say("4. The thread runs again and finishes without sending the email a second time:")
        third = _worker(store_dir, service_path, thread_id, kill=False, model=model)
        if third is None or third["status"] != "completed":
            say(f"   unexpected outcome: {third}")
            return 1
        say(f"   completed: {third['output']!r}\n")

        say("The thread's log (every step was durable before the next one started):")
        for event in await thread.timeline():
            where = f"{event.seq:>3} epoch {event.epoch}"
            say(f"   {where}  {event.actor_kind:<9} {event.type:<22} {_summary(event.data)}")
        c = service.counters(branch_id)
        say("\nWhat the service applied (read from the service, not assumed):")
        say(
            f"   refunds {c.refunds}, charges {c.charges} (from {c.charge_requests} charge"
            f" requests), emails {c.emails}; most applications of any one effect key:"
            f" {c.max_applications_per_key}"
        )
        ok = c.max_applications_per_key == 1 and c.emails >= 1
        if model is None:  # the scripted model asks for each exactly once
            ok = ok and (c.refunds, c.charges, c.emails) == (1, 1, 1)
        say("   nothing was applied twice." if ok else "   SOMETHING WAS APPLIED TWICE.")
        if kept:
            say(f"\nStore: {store_dir}. To read the thread's log again:")
            say("   " + command("timeline", thread_id, "--store", str(store_dir)))
        else:
            keep = quoted("demo", "--dir", "threads-demo")
            say(f"\nThe demo's store was temporary; run {keep} to keep it (in ./threads-demo).")
        return 0 if ok else 1
    finally:
        await store.close()


async def _thread_ids(store_dir: Path) -> set[str]:
    """The threads an earlier story left in this directory (a new story starts its own)."""
    if not (store_dir / "threads.db").exists():
        return set()
    store = sqlite(store_dir)
    try:
        return {b.thread_id for b in await store.list_threads()}
    finally:
        await store.close()


async def _lease_left(store: SQLiteStore, branch_id: str) -> str:
    state = await store.read_lease(branch_id)
    if state is None or not state.live:
        return "it already expired"
    return f"it expires in {(state.expires_at - state.now) / 1000:.1f} s"


def _finished_calls(events: list[Event]) -> list[str]:
    """Names of the tool calls whose result is recorded, in call order."""
    results = {data_of(e, "tool_result")["call_id"] for e in events if e.type == "tool_result"}
    calls = [data_of(e, "tool_call") for e in events if e.type == "tool_call"]
    return [call["name"] for call in calls if call["call_id"] in results]


def _summary(data: JsonObject) -> str:
    if "name" in data and "call_id" in data:
        return f"{data['name']} {data['call_id']}"
    for key in ("text", "reason", "outcome", "decision", "origin", "stop_reason"):
        if key in data:
            value = data[key]
            extra = f" ({data['call_id']})" if "call_id" in data else ""
            return (str(value)[:60] + extra).replace("\n", " ")
    if "call_id" in data:
        return str(data["call_id"])
    return ""


def run_demo(
    directory: str | None = None, say: Callable[[str], None] = print, model: str | None = None
) -> int:
    """The story on the scripted model, or on ``model`` (``openai:MODEL``, ``anthropic:MODEL``,
    already checked with ``threads.demo.models.demo_model``)."""
    if directory is not None:
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        return asyncio.run(_story(root, say, model))
    with tempfile.TemporaryDirectory(prefix="threads-demo-") as tmp:
        return asyncio.run(_story(Path(tmp), say, model, kept=False))
