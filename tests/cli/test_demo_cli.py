"""``threads demo --dir D``: the story runs on the scripted model, and run again in the same
directory it starts a new story (its own thread, its own counts) instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

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
