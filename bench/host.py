"""The host under load: 200 concurrent runs over HTTP on the scripted model, next to the same
200 runs in-process, in one run.

Each run is one turn that calls a read_only tool, then answers. Over HTTP a client POSTs
``/v1/runs`` and follows the run's SSE stream to its result; in-process the same agent runs
through ``Agent.stream``. We print p50/p99 of:

- start latency: POST sent → 202 received (HTTP); run asked → its ``user_input`` committed and
  seen (in-process);
- commit-to-client delay: an event's ``time`` (stamped as it is written, just before its commit)
  → the moment the client holds it (SSE frame parsed / stream item yielded), for events written
  while the client was connected. The stamp is taken before the append waits its turn on the
  store, so both figures include that wait; the difference is what HTTP and SSE add.

The server is a real ``threads serve`` process on loopback with a fresh SQLite store. Usage:
``python bench/host.py [RUNS]``. Timings are printed, never asserted. A last line gives the
same figures for runs one at a time, where the store is not the bottleneck.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from pydantic import BaseModel

from threads import Agent, agent, sqlite, tool
from threads.log.lines import Event
from threads.run.principal import Principal
from threads.testing.scripted import call, say, scripted_model, use

RUNS = int(sys.argv[1]) if __name__ == "__main__" and len(sys.argv) > 1 else 200
ALONE = 20  # runs one at a time first: the stream's own delay, without store contention
TOKEN = "bench-token"
WHO = {"issuer": "bench", "tenant": "bench", "subject": "bench"}


class Query(BaseModel):
    q: str


async def lookup(args: Query, ctx: object) -> str:
    return f"result for {args.q}"


def agents() -> list[Agent]:
    """What ``threads serve host:agents`` serves (this file, with bench/ on the path)."""
    script = [use(call("lookup", q="order 42")), say("done")]
    return [agent(name="bench", model=scripted_model(script),
                  tools=[tool(name="lookup", description="Look up.", input=Query,
                              execute=lookup, effect="read_only")])]


def now_ms() -> float:
    return time.time() * 1000


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def http_run(client: httpx.AsyncClient, starts: list[float], delays: list[float]) -> None:
    sent = time.perf_counter()
    response = await client.post("/v1/runs", json={"agent": "bench", "input": "hi"},
                                 headers={"idempotency-key": str(uuid.uuid4())})
    starts.append((time.perf_counter() - sent) * 1000)
    accepted = response.json()
    path = f"/v1/threads/{accepted['thread_id']}/runs/{accepted['run_id']}/events"
    async with client.stream("GET", path) as stream:
        connected = now_ms()  # events committed before the client was there don't count
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                item = json.loads(line[6:])
                if item["kind"] == "event" and item["event"]["time"] >= connected:
                    delays.append(now_ms() - item["event"]["time"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def over_http(
    root: Path,
) -> tuple[list[float], list[float], float, tuple[list[float], list[float]]]:
    tokens = root / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: WHO}))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, before any timing
        [sys.executable, "-m", "threads.cli", "serve", "host:agents", "--store",
         str(root / "http-store"), "--port", str(port), "--tokens", str(tokens)],
        env=env, stdout=subprocess.DEVNULL,
    )
    limits = httpx.Limits(max_connections=RUNS * 2 + 10, max_keepalive_connections=RUNS * 2)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits,
                                     headers={"authorization": f"Bearer {TOKEN}"},
                                     timeout=300) as client:
            for _ in range(300):
                try:
                    await client.get("/openapi.json")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)  # the server is still binding its port
            alone: tuple[list[float], list[float]] = ([], [])
            for _ in range(ALONE):
                await http_run(client, *alone)
            starts: list[float] = []
            delays: list[float] = []
            began = time.perf_counter()
            await asyncio.gather(*(http_run(client, starts, delays) for _ in range(RUNS)))
            return starts, delays, time.perf_counter() - began, alone
    finally:
        server.terminate()
        server.wait(timeout=60)


async def in_process(root: Path) -> tuple[list[float], list[float], float]:
    store = sqlite(root / "local-store")
    bot = agents()[0]
    principal = Principal(**WHO)
    starts: list[float] = []
    delays: list[float] = []

    async def one() -> None:
        asked = time.perf_counter()
        async with bot.stream("hi", store=store, principal=principal) as stream:
            async for item in stream:
                if isinstance(item, Event):
                    if item.type == "user_input":
                        starts.append((time.perf_counter() - asked) * 1000)
                    delays.append(now_ms() - item.time)
            await stream.result

    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(RUNS)))
    elapsed = time.perf_counter() - began
    await store.close()
    return starts, delays, elapsed


def line(label: str, starts: list[float], delays: list[float], elapsed: float) -> str:
    return (f"{label:<11} start p50 {pct(starts, 50):7.1f} ms  p99 {pct(starts, 99):7.1f} ms"
            f"   commit→client p50 {pct(delays, 50):6.1f} ms  p99 {pct(delays, 99):6.1f} ms"
            f"   ({len(delays)} events, {RUNS / elapsed:.0f} runs/s)")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        starts, delays, elapsed, alone = await over_http(root)
        local = await in_process(root)
    print(f"{RUNS} concurrent runs (scripted model, one read_only tool call each), SQLite")
    print(line("HTTP+SSE", starts, delays, elapsed))
    print(line("in-process", *local))
    print(f"one run at a time over HTTP ({ALONE} runs): start p50 {pct(alone[0], 50):.1f} ms,"
          f" commit→client p50 {pct(alone[1], 50):.1f} ms p99 {pct(alone[1], 99):.1f} ms"
          f" ({len(alone[1])} events)")


if __name__ == "__main__":
    asyncio.run(main())
