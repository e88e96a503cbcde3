"""``threads demo --dir D``: the story runs on the scripted model, and run again in the same
directory it starts a new story (its own thread, its own counts) instead of failing. The
commands it prints run as printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_hints import Cli, suggested

from threads.cli.main import main


def test_demo_twice_in_one_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stories = []
    for _ in range(2):
        assert main(["demo", "--dir", str(tmp_path)]) == 0
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        stories.append(captured.out)
    for out in stories:
        assert "takes the thread over at once" in out
        assert "refunds 1, charges 1 (from 1 charge requests), emails 1" in out
        assert "nothing was applied twice." in out
    first, second = (out.rsplit("threads timeline ", 1)[1].split()[0] for out in stories)
    assert first != second


def test_the_commands_the_demo_prints_run_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--dir", str(tmp_path / "a dir")]) == 0
    printed = capsys.readouterr().out
    commands = suggested(printed)
    assert [c.split()[1] for c in commands] == ["resolve", "timeline"], printed
    assert "resolve_parked" not in printed
    cli = Cli(capsys)
    assert cli.run_as_printed(commands[1])[0] == 0  # the thread's timeline
    code, text = cli.run_as_printed(commands[0])  # the operator's decision, made already
    assert (code, text.split(":")[:2]) == (1, ["error", " not_parked"])
