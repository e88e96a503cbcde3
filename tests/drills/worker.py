"""Drill worker: runs a real agent on a real store (SQLite, or Postgres) in its own process.

``python worker.py run SPEC`` runs one ``Agent.run`` and prints its outcome as a JSON line;
``python worker.py racer SPEC`` stays up and runs the thread once per ``go <race>`` stdin line;
``python worker.py many SPEC`` runs several threads at once on one store (see ``many``);
``python worker.py child SPEC`` runs the ``subagent`` profile's child thread ``thread`` alone;
``python worker.py cancel SPEC`` cancels ``thread`` (``Thread.cancel``, as the starter);
``python worker.py work SPEC`` makes one pass of a ``Worker`` serving the profile's agent.

SPEC is JSON: ``store`` (directory; or ``url`` and ``schema`` for Postgres), ``port`` (fake
service), ``profile`` (the script: ``drill``, ``every_class``, ``result_last`` with ``tool``,
``rate_limited`` (a 429 first when ``retry_after_ms`` is given), ``race``, or ``subagent``: a
parent that spawns a clerk; ``subagent_bg``: in the background, ``child_gate`` the gate its
look-up waits at; ``subagent_hooks``: the ``subagent`` parent with ``subagent_start`` (allow)
and ``subagent_stop`` (sends the clerk back once to email d too) hooks, each asking written as
a line to ``hook_log``; ``subagent_bg_hooks``: the same in the background;
``subagent_bg_ask``: the background clerk, and an email of the parent's own that waits for an
approval, in the same reply), ``thread`` (id or
null), ``input`` (text or null), ``label`` (who,
for the service), ``kill`` (where to SIGKILL ourselves, or null), ``gate`` (a service gate a tool
waits on, or null), ``clock_file`` (a file holding a millisecond offset the parent moves, or
null); for the control drills (and the ``subagent`` profiles' clerk) ``ask`` (permission rules
that need an approval), ``budget`` (the
agent's ``Budget`` fields) and
``price`` (``[input, output]``); for ``many``, ``runs``.

Kill points: ``{"type": T, "tool": name|null, "nth": n}`` dies right after the nth committed
append holding an event of type T (for that tool's call, when ``tool`` is given; with
``"last": true`` only an append whose last event it is);
``{"append_no": n}`` dies right after the nth committed append of this process;
``{"created": true}`` dies right after a new thread's branch is created (``n``: the nth);
``"in_created": n`` with a ``type`` kill point counts only events of the nth branch this
process created (a subagent's);
``{"in_execute": name, "nth": n}`` dies inside ``execute`` once the service applied the effect.
``model`` (``{"provider": "openai"|"anthropic", "base_url": URL, "api": ...}``, or null for the
scripted model) runs the agent on a real adapter against a fake provider server.
With ``"hold_at_gate": name`` (and ``"port"``) an append kill point waits at that service gate
instead of dying, so the parent can SIGSTOP the process at exactly that boundary.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from threads import (
    Budget,
    Extension,
    Found,
    HookDecision,
    NotFound,
    Permissions,
    Price,
    Principal,
    Reconcile,
    agent,
    open_thread,
    tool,
)
from threads.errors import StoreError
from threads.models.protocol import Model
from threads.run.agent import Agent
from threads.run.hooks import SubagentStartView, SubagentStopView
from threads.run.runner import RunOptions, start_run
from threads.run.worker import Worker
from threads.store.postgres import PostgresStore
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import ServiceClient
from threads.testing.scripted import call, rate_limited, say, scripted_model, use

STARTER = Principal(issuer="api", tenant="drill", subject="alice")
DAY_MS = 24 * 60 * 60 * 1000
RACE_TURNS = 400
TOOL_ARGS: dict[str, dict[str, Any]] = {
    "look_up": {"account": "a1"},
    "charge_card": {"amount": 5},
    "refund": {"amount": 2},
    "transfer": {"amount": 3},
    "send_email": {"to": "c@example.com"},
}
DRILL_SCRIPT = [
    use(call("look_up", account="a1")),
    use(call("charge_card", amount=5)),
    use(call("refund", amount=2)),
    use(call("send_email", to="c@example.com")),
    say("all done"),
    say("bye"),
]
# One call of each class in turn: read_only, idempotent, reconcilable final, reconcilable
# nonfinal, unguarded.
EVERY_CLASS_SCRIPT = [
    *(use(call(name, **args)) for name, args in TOOL_ARGS.items()),
    say("all done"),
    say("bye"),
]


# ``subagent``: the parent spawns one clerk, which looks up, charges (idempotent) and emails
# (unguarded) in its own thread; the parent then answers.
SUBAGENT_SCRIPT = [
    use(call("spawn_agent", agent="clerk", prompt="charge a1 and email c")),
    say("all done"),
    say("bye"),
]
# ``subagent_bg``: the same clerk started in the background; the parent's turn ends, then the
# clerk's end wakes it and it answers again.
SUBAGENT_BG_SCRIPT = [
    use(call("spawn_agent", agent="clerk", prompt="charge a1 and email c", background=True)),
    say("started the clerk"),
    say("the clerk is done"),
    say("bye"),
]
# ``subagent_bg_ask``: the same background clerk, and in the same reply an email the parent
# itself must have approved (``send_email`` is an ``ask`` rule of the parent here): its turn
# parks on the approval while its run waits for the clerk.
SUBAGENT_BG_ASK_SCRIPT = [
    use(call("spawn_agent", agent="clerk", prompt="charge a1 and email c", background=True),
        call("send_email", to="p@example.com")),
    say("emailed p"),
    say("bye"),
]
CLERK_SCRIPT = [
    use(call("look_up", account="a1")),
    use(call("charge_card", amount=5)),
    use(call("send_email", to="c@example.com")),
    say("charged and emailed"),
]


SUBAGENT_PROFILES = (
    "subagent", "subagent_bg", "subagent_bg_ask", "subagent_hooks", "subagent_bg_hooks",
)
# ``subagent_hooks`` (``subagent_bg_hooks``: in the background): the clerk, sent back once by
# the parent's subagent_stop hook with CONTINUE_REASON, emails d too.
CONTINUE_REASON = "email d@example.com too"
HOOKED_CLERK_SCRIPT = [
    *CLERK_SCRIPT,
    use(call("send_email", to="d@example.com")),
    say("emailed d too"),
]


def subagent_hooks(path: str) -> Extension:
    """Hooks that note each time they are asked (a line in ``path``): start allows; stop
    sends the child back once, then lets it stop."""

    def asked(line: str) -> None:
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")

    async def start(view: SubagentStartView) -> HookDecision:
        asked(f"start {view.call_id}")
        return HookDecision("allow")

    async def stop(view: SubagentStopView) -> HookDecision:
        asked(f"stop {view.call_id} {view.continuations}")
        if view.continuations == 0:
            return HookDecision("continue", reason=CONTINUE_REASON)
        return HookDecision("stop")

    return Extension(name="reviewer", subagent_start=start, subagent_stop=stop)


def result_last_script(name: str) -> list[Any]:
    """``name``'s call and a read-only look-up in one reply: the fence check before the look-up
    makes ``name``'s tool_result durable on its own, the last event of the log for a moment."""
    pair = use(call(name, **TOOL_ARGS[name]), call("look_up", account="a2"))
    return [pair, say("all done"), say("bye")]


def drill_script(spec: dict[str, Any]) -> list[Any]:
    profile = spec.get("profile", "drill")
    if profile == "one_call":
        return [use(call(spec["tool"], **TOOL_ARGS[spec["tool"]])), say("all done"), say("bye")]
    if profile == "race":
        return [item for _ in range(RACE_TURNS) for item in
                (use(call("charge_card", amount=1)), say("ok"))]
    if profile == "every_class":
        return list(EVERY_CLASS_SCRIPT)
    if profile == "rate_limited":  # a 429 with Retry-After before the first reply (if given)
        after = spec.get("retry_after_ms")
        limited = [rate_limited(retry_after_ms=after)] if after is not None else []
        return [*limited, say("all done"), say("bye")]
    if profile == "result_last":
        return result_last_script(spec["tool"])
    return list(DRILL_SCRIPT)


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class OffsetClock:
    """System time plus an offset (ms) read from a file the parent moves."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def now_ms(self) -> int:
        text = self.path.read_text().strip() if self.path.exists() else ""
        return time.time_ns() // 1_000_000 + int(text or 0)


RUN_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("run_key", default=None)


class Killing:
    """Kill points on a store: SIGKILLs its process right after a chosen append (or branch
    creation) commits. Mixed into a SQLite and a Postgres store below."""

    def setup_kill(self, kill: dict[str, Any] | None) -> None:
        self.kill = kill or {}
        self.appends = 0
        self.created = 0
        self.created_branches: list[str] = []
        self.hits = 0
        self.names: dict[str, str] | None = None
        self.refused: list[str] = []

    async def append(self, branch_id: str, events: Any, **kwargs: Any) -> None:
        if self.names is None and self.kill.get("tool"):
            await self._load_names(branch_id)
        try:
            await super().append(branch_id, events, **kwargs)  # type: ignore[misc]
        except StoreError as exc:
            self.refused.append(exc.code)
            raise
        self.appends += 1
        if self.names is not None:
            for event in events:
                if event.type == "tool_call":
                    self.names[event.data["call_id"]] = event.data["name"]
        if self._should_die(branch_id, events):
            if self.kill.get("hold_at_gate"):
                ServiceClient(self.kill["port"]).wait_gate(self.kill["hold_at_gate"])
            else:
                die()

    async def create_branch(self, header: Any, **kwargs: Any) -> None:
        await super().create_branch(header, **kwargs)  # type: ignore[misc]
        self.created += 1
        self.created_branches.append(header.branch_id)
        key = RUN_KEY.get()
        if key is not None:  # ``many``: tell the parent which thread this run just created
            print(json.dumps({"key": key, "created": header.thread_id}), flush=True)
        if self.kill.get("created") is not None and self.created == self.kill["created"]:
            die()  # ``created``: True (the first creation) or n (the nth)

    async def _load_names(self, branch_id: str) -> None:
        chain = await self.read_chain(branch_id)  # type: ignore[attr-defined]
        self.names = {
            e.data["call_id"]: e.data["name"]
            for s in chain.segments for e in s.events if e.type == "tool_call"
        }

    def _should_die(self, branch_id: str, events: Any) -> bool:
        kill = self.kill
        if "in_created" in kill and branch_id not in self.created_branches[
            kill["in_created"] - 1 : kill["in_created"]
        ]:
            return False
        if "append_no" in kill:
            return self.appends == kill["append_no"]
        if "type" not in kill:
            return False
        for event in events[-1:] if kill.get("last") else events:
            if event.type != kill["type"]:
                continue
            name = (self.names or {}).get(event.data.get("call_id"))
            if kill.get("tool") and name != kill["tool"]:
                continue
            self.hits += 1
            if self.hits == kill["nth"]:
                return True
        return False



class KillingStore(Killing, SQLiteStore):
    """A SQLite store with kill points."""

    def __init__(self, path: str, *, clock: Any, kill: dict[str, Any] | None) -> None:
        SQLiteStore.__init__(self, path, clock=clock)
        self.setup_kill(kill)


class KillingPostgresStore(Killing, PostgresStore):
    """A Postgres store (in ``schema``) with kill points."""

    def __init__(self, url: str, *, clock: Any, schema: str, kill: dict[str, Any] | None) -> None:
        PostgresStore.__init__(self, url, clock=clock, schema=schema, max_size=4)
        self.setup_kill(kill)


class Account(BaseModel):
    account: str


class Amount(BaseModel):
    amount: int


class Email(BaseModel):
    to: str


def build_agent(spec: dict[str, Any]) -> Agent:
    client = ServiceClient(spec["port"], spec.get("label", ""))
    kill = spec.get("kill") or {}
    executed: dict[str, int] = {}

    def after_apply(name: str) -> None:
        executed[name] = executed.get(name, 0) + 1
        if kill.get("in_execute") == name and executed[name] == kill.get("nth", 1):
            die()

    http_port = spec.get("http_port")
    freeze = spec.get("freeze") or {}

    def hold_before_send(name: str) -> None:
        """``freeze`` at ``before_send``: wait at its gate inside the tool. A blocking call, as
        a careless tool makes one: the run's event loop, and so its lease renewal, stop too."""
        if freeze.get("tool") == name and freeze.get("at") == "before_send":
            client.wait_gate(freeze["gate"])

    async def send(name: str, kind: str, ctx: Any, value: str, *, dedup: bool) -> str:
        """Apply at the service: over the line protocol, or (``http_port``) through the run's
        fenced ``ctx.http`` with ``ctx.epoch`` as the fencing token. ``freeze`` at
        ``in_flight`` has the service hold the request before applying it."""
        hold_before_send(name)
        if http_port is None:
            return client.apply(kind, ctx.effect_key, value, dedup=dedup)
        body = {"kind": kind, "key": ctx.effect_key, "value": value, "dedup": dedup,
                "who": client.who, "fence": {"scope": ctx.branch_id, "epoch": ctx.epoch}}
        if freeze.get("tool") == name and freeze.get("at") == "in_flight":
            body["hold"] = freeze["gate"]
        answer = await ctx.http.post(f"http://127.0.0.1:{http_port}/apply", json=body)
        answer.raise_for_status()
        return str(answer.json()["value"])

    async def read(ctx: Any, key: str) -> str | None:
        if http_port is None:
            return client.lookup(key)
        answer = await ctx.http.get(f"http://127.0.0.1:{http_port}/lookup",
                                    params={"key": key, "who": client.who})
        answer.raise_for_status()
        found = answer.json()
        return str(found["value"]) if found["found"] else None

    async def look_up(args: Account, ctx: Any) -> str:
        hold_before_send("look_up")
        await read(ctx, f"balance:{args.account}")
        if spec.get("gate"):
            client.wait_gate(spec["gate"])
        if spec.get("child_gate"):  # waits without stopping the run's other tasks
            await asyncio.to_thread(client.wait_gate, spec["child_gate"])
        after_apply("look_up")
        return f"account {args.account} is open"

    async def charge(args: Amount, ctx: Any) -> str:
        value = await send("charge_card", "charge", ctx, f"charged {args.amount}", dedup=True)
        after_apply("charge_card")
        race = ctx.deps.get("race") if isinstance(ctx.deps, dict) else None
        if race is not None:
            client.wait_gate(f"race-{race}")
        return value

    async def refund(args: Amount, ctx: Any) -> str:
        value = await send("refund", "refund", ctx, f"refunded {args.amount}", dedup=False)
        after_apply("refund")
        return value

    async def lookup_applied(key: str, ctx: Any) -> Found[str] | NotFound:
        value = await read(ctx, key)
        return NotFound() if value is None else Found(value)

    async def transfer(args: Amount, ctx: Any) -> str:
        value = await send("transfer", "transfer", ctx, f"transferred {args.amount}",
                           dedup=False)
        after_apply("transfer")
        return value

    async def send_email(args: Email, ctx: Any) -> str:
        value = await send("send_email", "email", ctx, f"emailed {args.to}", dedup=False)
        after_apply("send_email")
        return value

    tools = [
        tool(name="look_up", description="Look up an account.", input=Account, execute=look_up,
             effect="read_only"),
        tool(name="charge_card", description="Charge the card.", input=Amount, execute=charge,
             effect="idempotent", dedup_window_ms=DAY_MS),
        # settle_ms=0: most drills SIGKILL their workers, and a killed worker sends nothing
        # more, so a final not-found is trusted as soon as the thread is taken over; the
        # zombie drill freezes a holder instead and declares the window (``settle_ms``).
        tool(name="refund", description="Refund a charge.", input=Amount, execute=refund,
             effect="reconcilable", reconcile=Reconcile(lookup_applied, finality="final"),
             settle_ms=spec.get("settle_ms", 0)),
        tool(name="transfer", description="Move money between accounts.", input=Amount,
             execute=transfer, effect="reconcilable",
             reconcile=Reconcile(lookup_applied, finality="nonfinal")),
        tool(name="send_email", description="Email the customer.", input=Email,
             execute=send_email),
    ]
    if spec.get("profile") in SUBAGENT_PROFILES:
        hooked = spec["profile"].endswith("_hooks")
        clerk_script = HOOKED_CLERK_SCRIPT if hooked else CLERK_SCRIPT
        clerk = agent(name="clerk", model=scripted_model(list(clerk_script)),
                      instructions="Do the task.", tools=tools,
                      permissions=Permissions(ask=tuple(spec.get("ask") or ())))
        background = spec["profile"].startswith("subagent_bg")
        asks = spec["profile"] == "subagent_bg_ask"
        script = (SUBAGENT_BG_ASK_SCRIPT if asks else SUBAGENT_BG_SCRIPT if background
                  else SUBAGENT_SCRIPT)
        return agent(name="drill", model=scripted_model(list(script)),
                     instructions="Delegate.", tools=tools, subagents=[clerk],
                     permissions=Permissions(ask=("send_email",)) if asks else None,
                     extensions=[subagent_hooks(spec["hook_log"])] if hooked else [])
    model = (
        provider_model(spec["model"]) if spec.get("model")
        else scripted_model(drill_script(spec), price=drill_price(spec))
    )
    return agent(name="drill", model=model, instructions="Help the customer.", tools=tools,
                 permissions=Permissions(ask=tuple(spec.get("ask") or ())),
                 budget=Budget(**spec["budget"]) if spec.get("budget") else None)


def drill_price(spec: dict[str, Any]) -> Price | None:
    """``price``: ``[input, output]`` nano-units per token, for cost budgets."""
    price = spec.get("price")
    return Price(input=price[0], output=price[1]) if price else None


def provider_model(chosen: dict[str, Any]) -> Model:
    """A real adapter pointed at the parent's fake provider (the key is a placeholder)."""
    if chosen["provider"] == "anthropic":
        from threads.anthropic import anthropic

        return anthropic("claude-drill", api_key="drill-placeholder", base_url=chosen["base_url"],
                         max_output_tokens=1024)
    from threads.openai import openai

    return openai("gpt-drill", api_key="drill-placeholder", base_url=chosen["base_url"],
                  api=chosen.get("api", "responses"), context_window=128_000,
                  max_output_tokens=1024)


def open_store(spec: dict[str, Any]) -> KillingStore | KillingPostgresStore:
    """``url`` + ``schema``: a Postgres store; else a SQLite store in ``store``."""
    clock = OffsetClock(spec["clock_file"]) if spec.get("clock_file") else None
    if spec.get("url"):
        return KillingPostgresStore(spec["url"], clock=clock, schema=spec["schema"],
                                    kill=spec.get("kill"))
    return KillingStore(spec["store"], clock=clock, kill=spec.get("kill"))


def outcome(result: Any, store: Killing) -> dict[str, Any]:
    out: dict[str, Any] = {"status": result.status, "thread": result.thread.id,
                           "refused_appends": list(store.refused)}
    store.refused.clear()
    if result.status == "parked":
        out["pending"] = [[p.kind, p.id] for p in result.pending]
        out["details"] = [p.detail for p in result.pending]
    if result.status == "failed":
        out["error"] = result.error.code
    if result.status == "completed":
        out["output"] = result.output
    return out


async def run_once(spec: dict[str, Any]) -> dict[str, Any]:
    store = open_store(spec)
    bot = build_agent(spec)
    try:
        result = await bot.run(spec.get("input"), thread=spec.get("thread"), store=store,
                               principal=STARTER)
        return outcome(result, store)
    finally:
        await store.close()


async def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the ``subagent`` profile's child thread ``thread`` alone, as another worker would:
    the clerk as its parent pins it, decided under the parent's permissions too."""
    store = open_store(spec)
    parent = build_agent(spec)
    clerk = parent.subagent_named("clerk")
    assert clerk is not None
    try:
        result = await start_run(clerk.under_parent(parent), None, RunOptions(
            spec["thread"], store, principal=STARTER, ceiling=parent.permissions))
        return outcome(result, store)
    finally:
        await store.close()


async def cancel_once(spec: dict[str, Any]) -> dict[str, Any]:
    """``Thread.cancel`` on ``thread`` as the starter: its own barrier, then its subagents'."""
    store = open_store(spec)
    try:
        thread = await open_thread(store, spec["thread"], principal=STARTER)
        await thread.cancel(STARTER)
        return {"status": "cancel_recorded"}
    finally:
        await store.close()


async def work_once(spec: dict[str, Any]) -> dict[str, Any]:
    """One pass of a ``Worker`` serving the profile's agent over the store: it continues
    every thread with work (a subagent's thread through its tree's root)."""
    store = open_store(spec)
    worker = Worker(store, [build_agent(spec)], poll_ms=10)
    try:
        await worker.run_once()
        return {"status": "worked", "runs": worker.stats.runs,
                "outcomes": worker.stats.outcomes}
    finally:
        await store.close()


async def racer(spec: dict[str, Any]) -> None:
    store = open_store(spec)
    bot = build_agent(spec)
    print(json.dumps({"ready": True}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            break
        race = int(line.split()[1])
        result = await bot.run(f"race {race}", thread=spec["thread"], store=store,
                               principal=STARTER, deps={"race": race})
        print(json.dumps({"race": race, **outcome(result, store)}), flush=True)
    await store.close()


async def many(spec: dict[str, Any]) -> None:
    """Run every entry of ``runs`` (``key``, ``thread``, ``input``) at once on one store; print
    ``ready`` first (the parent's kill timer starts then), each new thread's id as soon as its
    branch exists, and each outcome as its run ends."""
    store = open_store(spec)
    bot = build_agent(spec)

    async def one(entry: dict[str, Any]) -> None:
        RUN_KEY.set(entry["key"])
        try:
            result = await bot.run(entry.get("input"), thread=entry.get("thread"), store=store,
                                   principal=STARTER)
            out = outcome(result, store)
        except Exception as exc:  # the parent reports it; the other runs go on
            out = {"status": "raised", "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps({"key": entry["key"], **out}), flush=True)

    print(json.dumps({"ready": True}), flush=True)
    try:
        await asyncio.gather(*(one(entry) for entry in spec["runs"]))
    finally:
        await store.close()


def print_outcome(run: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> None:
    """A drill worker's last act: run ``run`` on the spec the drill passed (``argv[2]``) and
    print its outcome as one JSON line, which the drill reads."""
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[2])))), flush=True)


def main() -> None:
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    if mode == "racer":
        asyncio.run(racer(spec))
        return
    if mode == "many":
        asyncio.run(many(spec))
        return
    if mode == "child":
        print_outcome(run_child)
        return
    if mode == "cancel":
        print_outcome(cancel_once)
        return
    if mode == "work":
        print_outcome(work_once)
        return
    print_outcome(run_once)


if __name__ == "__main__":
    main()
