"""The README stays a front page: short, its two commands are the ones CI runs (``.ci/run``
ends with the second, exactly), and every page it points to exists."""

from __future__ import annotations

import re

from doc_blocks import README, ROOT, SHELL, blocks

CI = ROOT / ".ci" / "run"


def _commands() -> list[str]:
    first = next(b for b in blocks(README.read_text()) if b.lang == SHELL)
    return [line for line in first.code.splitlines() if line.strip()]


def test_the_readme_is_a_front_page() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_opens_with_two_commands_try_and_develop() -> None:
    try_it, develop = _commands()
    assert "threads demo" in try_it
    assert "[dev]" not in try_it  # the demo needs the core only
    assert "[dev]" in develop
    assert "pytest" in develop


def test_ci_ends_with_the_readme_test_command_exactly() -> None:
    lines = [line.strip() for line in CI.read_text().splitlines()]
    last = [line for line in lines if line and not line.startswith("#")][-1]
    assert last == _commands()[1]


def test_every_page_the_readme_links_to_exists() -> None:
    links = re.findall(r"\]\((?!https?:|#)([^)#\s]+)", README.read_text())
    assert len(links) >= 8
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
