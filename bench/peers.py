"""threads next to DBOS and LangGraph, in one run: the same agent loop on each, a fresh process
and a fresh database per case.

The loop: a scripted model that asks for one read_only tool per turn (no network, no real
model), the tool answers, the model is asked again. A step is one model turn plus its tool call,
durable the way each framework makes it durable by default for an agent:

- threads: ``Agent.run`` on ``threads.sqlite(dir)`` (WAL, ``synchronous=FULL``);
- DBOS: a ``@DBOS.workflow`` whose model turn and tool call are ``@DBOS.step``s, on its SQLite
  system database (put in WAL mode first);
- LangGraph: the usual tool-calling graph (``MessagesState``, a model node, ``ToolNode``,
  ``tools_condition``) compiled with ``SqliteSaver``, invoked with ``durability="sync"`` (each
  checkpoint written before the next step).

Printed per framework: µs per step (median over ``--steps`` steps of one run; the time between
two tool calls), bytes on disk after an n-turn chat (≈1 KB per turn: a user message, a reply)
at n = 100 and 400, and steps/s with 32 runs at once in one process; then the ratios.

DBOS and LangGraph are not dependencies of threads: this script makes its own virtualenv
(``bench/.peers-venv``, git-ignored) and pip-installs them there from the package index on first
use. Run: ``.venv/bin/python bench/peers.py [--steps N] [--chat 100,400] [--concurrent 32]
[--repeat 3]``.
Timings are printed, never asserted; on a shared machine compare the ratios, which come from one
run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS_VENV = HERE / ".peers-venv"
PEER_PACKAGES = ["dbos", "langgraph", "langgraph-checkpoint-sqlite"]
FRAMEWORKS = ("threads", "dbos", "langgraph")
USER_TEXT = "Please look through the open invoices and tell me which are overdue. " * 13  # ~900 B
REPLY_TEXT = "Two invoices are overdue: 1041 and 1057; the rest are within their terms. "
CONCURRENT_STEPS = 50  # per run, in the concurrent case


def lookup_result(q: str) -> str:
    return f"result for {q}"


def dir_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


class Stamps:
    """Stamps each tool call: the time between two is one whole step."""

    def __init__(self) -> None:
        self.ns: list[int] = []
        self.lock = threading.Lock()

    def stamp(self) -> None:
        with self.lock:
            self.ns.append(time.perf_counter_ns())

    def median_step_us(self) -> float:
        gaps = [(b - a) / 1000 for a, b in zip(self.ns, self.ns[1:], strict=False)]
        return statistics.median(gaps)


# ---- threads (runs in the project's interpreter) ---------------------------------------------


def threads_case(kind: str, n: int, directory: Path) -> float:
    import asyncio

    from pydantic import BaseModel

    from threads import agent, sqlite, tool
    from threads.testing.scripted import call, say, scripted_model, use

    class Query(BaseModel):
        q: str

    stamps = Stamps()

    async def lookup(args: Query, ctx: object) -> str:
        stamps.stamp()
        return lookup_result(args.q)

    def looping(steps: int) -> Any:
        script = [use(call("lookup", q=f"q{i}")) for i in range(steps)] + [say("done")]
        lookup_tool = tool(
            name="lookup", description="Look up.", input=Query, execute=lookup,
            effect="read_only",
        )
        return agent(name="bench", model=scripted_model(script), tools=[lookup_tool])

    async def run() -> float:
        store = sqlite(directory / "store")
        try:
            if kind == "step":
                await looping(n).run("go", store=store)
                return stamps.median_step_us()
            if kind == "chat":
                bot = agent(name="chat", model=scripted_model([say(REPLY_TEXT)] * n))
                first = await bot.run(USER_TEXT, store=store)
                for _ in range(n - 1):
                    await bot.run(USER_TEXT, store=store, thread=first.thread.id)
                await store.close()
                return dir_bytes(directory / "store")
            await looping(1).run("warm up", store=store)  # as the peers launch first
            start = time.perf_counter()
            await asyncio.gather(*(looping(CONCURRENT_STEPS).run("go", store=store)
                                   for _ in range(n)))
            return n * CONCURRENT_STEPS / (time.perf_counter() - start)
        finally:
            await store.close()

    return asyncio.run(run())


# ---- DBOS (runs in the peers' virtualenv) ----------------------------------------------------


def dbos_case(kind: str, n: int, directory: Path) -> float:
    import sqlite3

    from dbos import DBOS

    db = directory / "dbos.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")  # persistent in the file
    DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{db}"})
    stamps = Stamps()

    @DBOS.step()
    def model_turn(conversation: list[dict[str, Any]], steps: int) -> dict[str, Any]:
        turns = sum(1 for m in conversation if m["role"] == "assistant")
        if turns < steps:
            return {"role": "assistant", "tool_call": {"name": "lookup", "q": f"q{turns}"}}
        return {"role": "assistant", "text": "done"}

    @DBOS.step()
    def lookup(q: str) -> str:
        stamps.stamp()
        return lookup_result(q)

    @DBOS.workflow()
    def agent_loop(steps: int) -> int:
        conversation: list[dict[str, Any]] = [{"role": "user", "text": "go"}]
        while True:
            reply = model_turn(conversation, steps)
            conversation.append(reply)
            if "tool_call" not in reply:
                return len(conversation)
            conversation.append({"role": "tool", "text": lookup(reply["tool_call"]["q"])})

    @DBOS.step()
    def user_message() -> str:
        return USER_TEXT

    @DBOS.step()
    def model_reply(conversation: list[dict[str, Any]]) -> str:
        return REPLY_TEXT

    @DBOS.workflow()
    def chat(turns: int) -> int:
        conversation: list[dict[str, Any]] = []
        for _ in range(turns):
            conversation.append({"role": "user", "text": user_message()})
            conversation.append({"role": "assistant", "text": model_reply(conversation)})
        return len(conversation)

    DBOS.launch()
    try:
        if kind == "step":
            agent_loop(n)
            return stamps.median_step_us()
        if kind == "chat":
            chat(n)
            DBOS.destroy()
            return dir_bytes(directory)
        start = time.perf_counter()
        handles = [DBOS.start_workflow(agent_loop, CONCURRENT_STEPS) for _ in range(n)]
        for handle in handles:
            handle.get_result()
        return n * CONCURRENT_STEPS / (time.perf_counter() - start)
    finally:
        DBOS.destroy()


# ---- LangGraph (runs in the peers' virtualenv) -----------------------------------------------


def langgraph_case(kind: str, n: int, directory: Path) -> float:
    import sqlite3

    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    stamps = Stamps()

    @tool
    def lookup(q: str) -> str:
        """Look up."""
        stamps.stamp()
        return lookup_result(q)

    def scripted(steps: int) -> Callable[[MessagesState], dict[str, Any]]:
        def model(state: MessagesState) -> dict[str, Any]:
            turns = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
            if steps == 0:  # a chat turn: just reply
                return {"messages": [AIMessage(content=REPLY_TEXT)]}
            if turns < steps:
                call = {"name": "lookup", "args": {"q": f"q{turns}"}, "id": f"call_{turns}"}
                return {"messages": [AIMessage(content="", tool_calls=[call])]}
            return {"messages": [AIMessage(content="done")]}

        return model

    conn = sqlite3.connect(directory / "langgraph.sqlite", check_same_thread=False)
    saver = SqliteSaver(conn)

    def compiled(steps: int) -> Any:
        graph = StateGraph(MessagesState)
        graph.add_node("model", scripted(steps))
        graph.add_node("tools", ToolNode([lookup]))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        return graph.compile(checkpointer=saver)

    def loop(app: Any, thread_id: str, steps: int) -> None:
        config = {"configurable": {"thread_id": thread_id}, "recursion_limit": 4 * steps + 10}
        app.invoke({"messages": [HumanMessage(content="go")]}, config, durability="sync")

    try:
        if kind == "step":
            loop(compiled(n), "t", n)
            return stamps.median_step_us()
        if kind == "chat":
            app = compiled(0)
            config = {"configurable": {"thread_id": "chat"}}
            for _ in range(n):
                turn = {"messages": [HumanMessage(content=USER_TEXT)]}
                app.invoke(turn, config, durability="sync")
            conn.close()
            return dir_bytes(directory)
        app = compiled(CONCURRENT_STEPS)
        workers = [
            threading.Thread(target=loop, args=(app, f"t{i}", CONCURRENT_STEPS)) for i in range(n)
        ]
        start_s = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return n * CONCURRENT_STEPS / (time.perf_counter() - start_s)
    finally:
        conn.close()


CASES: dict[str, Callable[[str, int, Path], float]] = {
    "threads": threads_case,
    "dbos": dbos_case,
    "langgraph": langgraph_case,
}


# ---- the parent: a fresh process and database per case ----------------------------------------


def peers_python() -> Path:
    """The peers' virtualenv's interpreter; the virtualenv is made on first use."""
    python = PEERS_VENV / "bin" / "python"
    check = [str(python), "-c", "import dbos, langgraph.checkpoint.sqlite"]
    if python.exists() and subprocess.run(check, check=False, capture_output=True).returncode == 0:
        return python
    print(f"installing {', '.join(PEER_PACKAGES)} into {PEERS_VENV} ...", flush=True)
    venv.create(PEERS_VENV, with_pip=True, clear=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         *PEER_PACKAGES],
        check=True,
    )
    return python


def run_case(python: Path, framework: str, kind: str, n: int) -> float:
    with tempfile.TemporaryDirectory(prefix=f"peers-{framework}-") as tmp:
        proc = subprocess.run(
            [str(python), __file__, "--case", framework, kind, str(n), tmp],
            check=False, capture_output=True, text=True,
        )
    if proc.returncode != 0:
        raise SystemExit(f"{framework} {kind} {n} failed:\n{proc.stderr[-3000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps of the timed run")
    parser.add_argument("--chat", default="100,400", help="chat lengths whose bytes are shown")
    parser.add_argument("--concurrent", type=int, default=32, help="runs at once")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the timed cases")
    parser.add_argument("--case", nargs=4, metavar=("FRAMEWORK", "KIND", "N", "DIR"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        framework, kind, n, directory = args.case
        print(json.dumps(CASES[framework](kind, int(n), Path(directory))))
        return
    peers = peers_python()
    pythons = {"threads": Path(sys.executable), "dbos": peers, "langgraph": peers}
    chats = [int(n) for n in args.chat.split(",")]
    samples: dict[str, dict[str, list[float]]] = {f: {} for f in FRAMEWORKS}

    def sample(framework: str, key: str, kind: str, n: int) -> None:
        value = run_case(pythons[framework], framework, kind, n)
        samples[framework].setdefault(key, []).append(value)

    # Timed cases take turns (threads, DBOS, LangGraph, threads, ...), so a machine whose speed
    # drifts during the run slows all three alike; the medians are printed.
    for _ in range(args.repeat):
        for framework in FRAMEWORKS:
            sample(framework, "step", "step", args.steps)
            sample(framework, "concurrent", "concurrent", args.concurrent)
    for framework in FRAMEWORKS:
        for n in chats:
            sample(framework, f"chat{n}", "chat", n)
    results = {
        f: {key: statistics.median(values) for key, values in samples[f].items()}
        for f in FRAMEWORKS
    }
    print_table(results, args.steps, chats, args.concurrent)


def print_table(
    results: dict[str, dict[str, float]], steps: int, chats: list[int], concurrent: int
) -> None:
    rows = [(f"µs per step ({steps}-step run)", "step", "{:,.0f}")]
    rows += [(f"bytes on disk, {n}-turn chat", f"chat{n}", "{:,.0f}") for n in chats]
    rows.append((f"steps/s, {concurrent} runs at once", "concurrent", "{:,.0f}"))
    print(f"{'':34s}" + "".join(f"{f:>14s}" for f in FRAMEWORKS))
    for label, key, fmt in rows:
        print(f"{label:34s}" + "".join(f"{fmt.format(results[f][key]):>14s}" for f in FRAMEWORKS))
    print()
    print("ratios, threads / peer (per step: below 1 is faster; bytes: below 1 is smaller;")
    print("steps/s: above 1 is more)")
    for peer in ("dbos", "langgraph"):
        ratios = "".join(
            f"  {key}={fmt_ratio(results['threads'][key], results[peer][key])}"
            for _, key, _ in rows
        )
        speedup = results[peer]["step"] / results["threads"]["step"]
        print(f"  threads/{peer}:{ratios}  (per step {speedup:.1f}x faster)")


def fmt_ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}"


if __name__ == "__main__":
    main()
