"""``run_sync``: refused under a running event loop (with what to do instead); in a real
process, one Ctrl-C cancels durably and says what it waits for, a second stops at once, and the
next run settles what that left in doubt."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from threads import ConfigError, FakeClock, Parked, RunResult, agent, sqlite
from threads.testing import say, scripted_model

T0 = 1_790_000_000_000
LEASE_TTL_MS = 30_000

PROGRAM = '''
import asyncio, sys, threading
from threads import FakeClock, RunContext, agent, sqlite, tool
from threads.testing import call, say, scripted_model, use

@tool(effect="read_only")
async def polite_tool(ctx: RunContext) -> str:
    """Waits until the run is cancelled."""
    print("started", flush=True)
    await ctx.cancelled.wait()
    return "stopped early"

@tool
def stubborn_tool() -> str:
    """Never looks at the cancel."""
    print("started", flush=True)
    threading.Event().wait()
    return "never"

def bot(tool_name):
    script = [use(call(tool_name)), say("done")]
    return agent(name="b", model=scripted_model(script), tools=[polite_tool, stubborn_tool])

if __name__ == "__main__":
    store_dir, tool_name, now = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = sqlite(store_dir, clock=FakeClock(now))
    result = bot(tool_name).run_sync("go", store=store)
    print(result.status, flush=True)
    asyncio.run(store.close())
'''


def _start(tmp_path: Path, tool_name: str) -> subprocess.Popen[str]:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    child = subprocess.Popen(
        [sys.executable, str(program), str(tmp_path / "store"), tool_name, str(T0)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "started"
    return child


def _wait_for_line(child: subprocess.Popen[str], needle: str) -> str:
    assert child.stderr is not None
    while True:
        line = child.stderr.readline()
        assert line, f"the child closed stderr before saying {needle!r}"
        if needle in line:
            return line


async def test_run_sync_under_a_running_loop_says_to_await_run(tmp_path: Path) -> None:
    store = sqlite(tmp_path / "store", clock=FakeClock())
    bot = agent(name="b", model=scripted_model([say("hi")]))
    with pytest.raises(ConfigError) as refused:
        bot.run_sync("hi", store=store)
    assert refused.value.code == "invalid_config"
    assert "await bot.run(...)" in refused.value.message
    assert await store.list_threads() == []  # refused before anything was written
    await store.close()


def test_one_ctrl_c_cancels_durably_and_says_what_it_waits_for(tmp_path: Path) -> None:
    child = _start(tmp_path, "polite_tool")
    child.send_signal(signal.SIGINT)
    said = _wait_for_line(child, "cancelling the run")
    assert "Waiting for polite_tool to finish" in said
    assert "Ctrl-C again to stop at once" in said
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    assert out.strip() == "cancelled"
    events = asyncio.run(_types(tmp_path, T0))
    assert events[-3:] == ["cancel_requested", "cancelled", "turn_completed"]


def test_a_second_ctrl_c_stops_at_once_and_the_next_run_settles_it(tmp_path: Path) -> None:
    child = _start(tmp_path, "stubborn_tool")
    child.send_signal(signal.SIGINT)
    _wait_for_line(child, "cancelling the run")
    child.send_signal(signal.SIGINT)
    _wait_for_line(child, "stopping at once")
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGINT  # died of the signal, as an unhandled Ctrl-C
    out, _ = child.communicate(timeout=30)  # reads what is left and closes the pipes
    assert out == ""  # no result: it never finished
    # The dead run's lease runs out (the store's clock is moved, not waited for); the next
    # run finds the unguarded call in doubt and parks it for a person, as after any crash.
    result = asyncio.run(_rerun(tmp_path, T0 + LEASE_TTL_MS + 1))
    assert isinstance(result, Parked)
    assert result.reason == "effect_unknown"


async def _types(tmp_path: Path, now: int) -> list[str]:
    store = sqlite(tmp_path / "store", clock=FakeClock(now))
    try:
        [thread] = await store.list_threads()
        chain = await store.read_chain(thread.branch_id)
        return [e.type for e in chain.fold(now).events]
    finally:
        await store.close()


async def _rerun(tmp_path: Path, now: int) -> RunResult:
    sys.path.insert(0, str(tmp_path))
    try:
        import program  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    store = sqlite(tmp_path / "store", clock=FakeClock(now))
    try:
        [thread] = await store.list_threads()
        return await program.bot("stubborn_tool").run(None, store=store, thread=thread.thread_id)
    finally:
        await store.close()
