"""The operator's CLI end to end, in real processes: the worker story (a crash, ``threads
worker`` parks the thread, ``threads resolve``, the worker finishes it), ``threads lease`` and
``ls`` naming a live holder and a dead one, ``timeline --json`` (the log's own bytes) and
``--follow`` (events another process commits), quiet broken pipes, ``--version``, and a worker
that exits 1 when a thread failed.

The agents live in a module written to the test's directory (``story.py``), as a user's would;
``threads worker story`` imports it from the working directory.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import threads
from threads.cli.main import main

STORY = '''
import os, signal
from pydantic import BaseModel
from threads import agent, tool
from threads.testing.scripted import call, say, scripted_model, use


class Email(BaseModel):
    to: str


async def send_email(args: Email, ctx) -> str:
    with open("sent.txt", "a") as sent:
        sent.write(ctx.effect_key + "\\n")
    if os.environ.get("CRASH_AFTER_SEND"):  # the mail went out; the process dies before the
        os.kill(os.getpid(), signal.SIGKILL)  # log records it
    return "sent"


bot = agent(
    name="mailer",
    model=scripted_model([use(call("send_email", to="c@example.com")), say("mailed"),
                          say("second")]),
    instructions="Mail the customer.",
    tools=[tool(name="send_email", description="Email.", input=Email, execute=send_email)],
)
'''

START = (
    "import asyncio, sys, story; from threads import sqlite\n"
    "async def go():\n"
    "    store = sqlite(sys.argv[1])\n"
    "    result = await story.bot.run(sys.argv[2], store=store,"
    " thread=sys.argv[3] if len(sys.argv) > 3 else None)\n"
    "    print(result.thread.id, result.status, flush=True)\n"
    "    await store.close()\n"
    "asyncio.run(go())\n"
)


@pytest.fixture
def story(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agents' modules in a fresh working directory: ``story`` and ``changed`` (the same
    agent name with other instructions: a config change)."""
    (tmp_path / "story.py").write_text(STORY)
    (tmp_path / "changed.py").write_text(STORY.replace("Mail the customer.", "Something else."))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("story", "changed"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``threads ARGS`` in this process: (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def env(**extra: str) -> dict[str, str]:
    src = str(Path(threads.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [src, os.getcwd(), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def start(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", START, "store", *args], capture_output=True, text=True,
        env=env(**extra), timeout=120, check=False,
    )


def crashed_thread(capsys: pytest.CaptureFixture[str]) -> str:
    """A thread whose run (a real process) was SIGKILLed right after its email went out."""
    crash = start("mail the customer", CRASH_AFTER_SEND="1")
    assert crash.returncode == -signal.SIGKILL, crash.stderr
    return newest_thread(capsys)


def newest_thread(capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = run_cli(capsys, "ls", "--store", "store")
    assert code == 0, err
    return out.splitlines()[1].split()[0]


def events(capsys: pytest.CaptureFixture[str], thread: str) -> list[dict[str, Any]]:
    code, out, err = run_cli(capsys, "timeline", thread, "--json", "--store", "store")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_the_worker_story_from_the_cli(story: Path, capsys: pytest.CaptureFixture[str]) -> None:
    thread = crashed_thread(capsys)
    # The dead run's process is gone, so the worker takes its thread over at once.
    code, out, err = run_cli(capsys, "worker", "story", "--store", "store", "--once")
    assert code == 0, out + err
    assert "worker done: runs=1 parked=1" in out
    parked = [e for e in events(capsys, thread) if e["type"] == "parked"]
    address = parked[-1]["data"]["address"]
    assert address["kind"] == "effect"
    key = address["id"]
    assert (story / "sent.txt").read_text().split() == [key]
    code, out, err = run_cli(capsys, "resolve", thread, key, "--assume-done", "--store", "store")
    assert code == 0, err
    code, out, err = run_cli(capsys, "worker", "story", "--store", "store", "--once")
    assert code == 0, out + err
    assert "worker done: runs=1 completed=1" in out
    log = events(capsys, thread)
    assert log[-1]["type"] == "turn_completed"
    assert (story / "sent.txt").read_text().split() == [key]  # never sent twice
    decision = next(e for e in log if e["type"] == "effect_resolved")
    assert decision["actor"] == {
        "kind": "approver",
        "principal": {"issuer": "api", "subject": "operator", "tenant": "local"},
    }


def test_a_worker_exits_1_when_a_thread_failed(
    story: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crashed_thread(capsys)
    code, out, err = run_cli(capsys, "worker", "changed", "--store", "store", "--once")
    assert code == 1, out + err
    assert "invalid_config" in out  # a config change is refused
    assert err.startswith("error: thread_failed: 1 run(s) failed")


def test_lease_and_ls_name_the_holder(story: Path, capsys: pytest.CaptureFixture[str]) -> None:
    thread = crashed_thread(capsys)
    code, dead, _ = run_cli(capsys, "lease", thread, "--store", "store")
    assert code == 0
    assert "its process is gone (this host): the next run takes over at once" in dead
    assert re.search(r"expires  \S+Z \(in \d+\.\d s\)", dead)  # still live by the clock
    assert "died (its lease is taken over at once)" in run_cli(capsys, "ls", "--store", "store")[1]
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import asyncio, sys; from threads import sqlite\n"
         "async def hold():\n"
         "    store = sqlite('store')\n"
         "    branch = await store.root_branch(sys.argv[1])\n"
         "    await store.acquire_lease(branch.branch_id, 'holder', 30000)\n"
         "    print('held', flush=True)\n"
         "    sys.stdin.readline()\n"
         "asyncio.run(hold())\n", thread],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env(),
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        live = run_cli(capsys, "lease", thread, "--store", "store")[1]
        assert f"holder   pid {holder.pid} on host " in live
        assert "state    held (running)" in live
        assert f"held by pid {holder.pid} on host" in run_cli(capsys, "ls", "--store", "store")[1]
        code, _, busy = run_cli(capsys, "resolve", thread, "k:1", "--assume-done", "--store",
                                "store")
        assert code == 1
        assert busy.startswith(f"error: branch_busy: another process is running this thread"
                               f" (pid {holder.pid} on host ")
        assert re.search(r"its lease expires in \d+\.\d s", busy)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()


def test_timeline_json_is_the_logs_own_bytes(
    story: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert start("hello").returncode == 0
    thread = newest_thread(capsys)
    shown = run_cli(capsys, "timeline", thread, "--json", "--store", "store")[1]
    exported = run_cli(capsys, "export", thread, "--store", "store")[1]
    lines = exported.encode().splitlines(keepends=True)
    assert shown.encode() == b"".join(lines[1:-1])  # no header, no head line


def test_timeline_follow_prints_what_another_process_commits(
    story: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = start("hello")
    thread = first.stdout.split()[0]
    follow = subprocess.Popen(
        [sys.executable, "-m", "threads.cli", "timeline", thread, "--follow", "--json",
         "--store", "store"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert follow.stdout is not None
        for line in follow.stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        before = len(events(capsys, thread))
        seen = [json.loads(lines.get(timeout=60)) for _ in range(before)]
        assert [e["seq"] for e in seen] == list(range(1, before + 1))
        assert start("again", thread).returncode == 0  # a writer in another process
        after = events(capsys, thread)
        more = [json.loads(lines.get(timeout=60)) for _ in range(len(after) - before)]
        assert [*seen, *more] == after
        assert any(e["type"] == "user_input" and e["data"]["text"] == "again" for e in more)
    finally:
        follow.send_signal(signal.SIGINT)
        follow.wait(timeout=30)
        reader.join(timeout=30)
        assert follow.stdout is not None
        follow.stdout.close()
    assert follow.returncode == 0
    assert follow.stderr is not None
    assert "Traceback" not in follow.stderr.read()
    follow.stderr.close()


def test_a_closed_pipe_is_quiet(story: Path) -> None:
    # An input line of 100 kB: more than a pipe holds, so the writer meets the closed pipe.
    thread = start("x" * 100_000).stdout.split()[0]
    for argv in (["timeline", thread], ["timeline", thread, "--json"], ["export", thread]):
        piped = subprocess.run(
            f"{sys.executable} -m threads.cli {' '.join(argv)} --store store | head -c 100",
            shell=True, capture_output=True, text=True, env=env(), timeout=60, check=False,
        )
        assert len(piped.stdout) == 100, argv
        assert piped.stderr == "", argv


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"threads {threads.__version__}\n"


def test_postgres_store_is_importable_like_the_adapters() -> None:
    from threads.postgres import postgres
    from threads.store.postgres import postgres as store_postgres

    assert postgres is store_postgres
