"""Every command the CLI tells a person to run runs as printed, and the CLI never gives Python
advice (``threads.cli.hints``).

The scenario: a store in a directory whose name needs quoting, threads of another principal
than the CLI's default (so every suggestion must carry ``--store``, ``--issuer``, ``--tenant``
and ``--subject``): one parked on an approval, one parked on an effect whose outcome is unknown,
one whose stored line was edited (in a second store). The CLI is run the way an operator meets
each hint (listing what waits, and each refusal that has one: unknown ids, a wrong args hash, a
busy thread, another principal, a bad argument, a damaged log). Every ``threads <command>`` in
what it printed is taken as printed (between backticks, or to the end of its line) and run
through ``main``: each must be accepted (no usage error), and the decisions an ``approvals``
listing offers must each succeed on the state it listed.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from threads import EffectUnknown, Parked, Permissions, Principal, agent, sqlite, tool
from threads.cli.main import build_parser, main
from threads.testing.scripted import call, say, scripted_model, use

OPS = Principal("cli", "acme", "ops")
PARSERS: dict[str, argparse.ArgumentParser] = next(
    a.choices for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
)
COMMANDS = sorted(PARSERS)
MENTION = re.compile(r"(`?)threads (?:" + "|".join(COMMANDS) + r")(?=[\s`]|$)")
PYTHON_ADVICE = re.compile(
    r"\b[a-z_]+\(\)|with agent=|\b(?:principal|approvers|remember_rule)=|open_thread|\bThread\."
    r"|\bthreads\.(?!db\b)[a-z_]+|\bawait\b|\b[A-Z][a-z]+\.[a-z_]+\b"
)


class Write(BaseModel):
    path: str
    body: str = ""


class Email(BaseModel):
    to: str


async def _write(args: Write, ctx: object) -> str:
    return "written"


async def _send(args: Email, ctx: object) -> str:
    raise EffectUnknown("the mail server timed out after accepting the message")


def _parked(store_dir: Path, bot: Any) -> str:
    async def go() -> str:
        store = sqlite(store_dir)
        try:
            result = await bot.run("go", store=store, principal=OPS)
            assert isinstance(result, Parked), result
            return str(result.thread.id)
        finally:
            await store.close()

    return asyncio.run(go())


def approval_thread(store_dir: Path) -> str:
    return _parked(store_dir, agent(
        name="writer",
        model=scripted_model([use(call("write_file", path="a b", body="x")), say("ok")]),
        tools=[tool(name="write_file", description="Write.", input=Write, execute=_write)],
        permissions=Permissions(ask=["write_file"]),
    ))


def effect_thread(store_dir: Path) -> str:
    return _parked(store_dir, agent(
        name="mailer",
        model=scripted_model([use(call("send_email", to="c@example.com")), say("mailed")]),
        tools=[tool(name="send_email", description="Email.", input=Email, execute=_send)],
    ))


def hold_lease(store_dir: Path, thread_id: str) -> Callable[[], None]:
    """Hold the thread's lease as a live run would; returns its release."""

    async def acquire() -> Any:
        store = sqlite(store_dir)
        try:
            branch = await store.root_branch(thread_id)
            return await store.acquire_lease(branch.branch_id, "some-other-run", 600_000)
        finally:
            await store.close()

    lease = asyncio.run(acquire())

    def release() -> None:
        async def go() -> None:
            store = sqlite(store_dir)
            try:
                await store.release_lease(lease)
            finally:
                await store.close()

        asyncio.run(go())

    return release


def suggested(text: str) -> list[str]:
    """Every ``threads <command>`` in ``text``: between backticks, or to the end of its line."""
    found = []
    for match in MENTION.finditer(text):
        start = match.start() + len(match.group(1))
        if match.group(1):
            found.append(text[start:text.index("`", start)])
        else:
            found.append(text[start:].split("\n", 1)[0].strip())
    return found


class Cli:
    """Runs ``threads`` in process, keeping everything it printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.printed: list[str] = []

    def __call__(self, *argv: str) -> tuple[int, str]:
        self.capsys.readouterr()
        code = main(list(argv))
        out = self.capsys.readouterr()
        text = out.out + out.err
        self.printed.append(text)
        assert "Traceback" not in text
        return code, text

    def run_as_printed(self, line: str) -> tuple[int, str]:
        words = shlex.split(line)
        assert words[0] == "threads", line
        code, text = self(*words[1:])
        assert code != 2, (line, text)  # a usage error: the hint does not run as printed
        assert "error: usage" not in text, (line, text)
        return code, text


def test_every_hint_runs_as_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_dir = tmp_path / "the store's dir"
    approval, effect = approval_thread(store_dir), effect_thread(store_dir)
    before = tmp_path / "before"
    shutil.copytree(store_dir, before)
    damaged_dir = tmp_path / "damaged store"
    damaged = approval_thread(damaged_dir)
    db = sqlite3.connect(damaged_dir / "threads.db")
    db.execute("UPDATE events SET line = CAST(replace(CAST(line AS TEXT), '\"go\"', '\"GO\"')"
               " AS BLOB)")
    db.commit()
    db.close()

    cli = Cli(capsys)
    ops = ["--store", str(store_dir), "--issuer", "cli", "--tenant", "acme", "--subject", "ops"]
    code, listing = cli("approvals", approval, *ops)
    assert code == 0
    decisions = suggested(listing)
    code, parked = cli("approvals", effect, *ops)
    assert code == 0
    decisions += suggested(parked)
    assert [shlex.split(d)[1] for d in decisions] == ["approve", "deny", "resolve", "resolve"]
    assert '"to": "c@example.com"' in parked  # the parked call's arguments are shown
    challenge = shlex.split(decisions[0])[3]

    refusals = [
        ("approve", approval, "no-such-challenge", *ops),  # not_pending
        ("approve", approval, challenge, "--args-hash", "0" * 64, *ops),  # approval_mismatch
        ("resolve", approval, "x:y", "--assume-done", *ops),  # not_parked
        ("timeline", "no-such-thread", "--store", str(store_dir), "--tenant", "acme"),
        ("ls", "--store", str(tmp_path / "nowhere")),  # no store there
        ("approve", approval, challenge, *ops[:-1], "eve"),  # forbidden
        ("approve", approval, challenge, *ops[:-1], ""),  # invalid_config
        ("timeline", damaged, "--store", str(damaged_dir), "--tenant", "acme"),  # log_corrupt
        ("verify", "--store", str(damaged_dir)),
    ]
    for argv in refusals:
        code, text = cli(*argv)
        assert code == 1, (argv, text)
    release = hold_lease(store_dir, approval)
    try:
        code, busy = cli("approve", approval, challenge, *ops)  # branch_busy
        assert code == 1, busy
        assert "branch_busy" in busy
        hints = [line for text in cli.printed for line in suggested(text)]
        for line in suggested(busy):
            assert cli.run_as_printed(line)[0] == 0  # threads lease: who holds it
    finally:
        release()

    everything = "\n".join(cli.printed)
    assert not PYTHON_ADVICE.search(everything), PYTHON_ADVICE.findall(everything)
    assert {shlex.split(h)[1] for h in hints} >= {"approvals", "timeline", "ls", "verify",
                                                   "lease", "approve", "deny", "resolve"}
    for line in hints:
        if line not in decisions:
            cli.run_as_printed(line)
    for line in decisions:  # each on the state the listing showed
        shutil.rmtree(store_dir)
        shutil.copytree(before, store_dir)
        code, text = cli.run_as_printed(line)
        assert code == 0, (line, text)
    assert not PYTHON_ADVICE.search("\n".join(cli.printed))


def test_every_option_and_argument_has_help_and_says_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lacking = []
    for name, parser in PARSERS.items():
        if not parser.description:
            lacking.append(f"{name}: no description")
        for action in parser._actions:
            if action.dest in ("help", "parsers"):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                lacking.append(f"{label}: no help")
            elif action.default not in (None, False) and "default" not in action.help:
                lacking.append(f"{label}: its default {action.default!r} is not said")
        assert main([name, "--help"]) == 0
        assert not PYTHON_ADVICE.search(capsys.readouterr().out), name
    assert lacking == []
