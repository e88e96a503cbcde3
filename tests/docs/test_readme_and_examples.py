"""The README's Python blocks and the programs in ``examples/`` run as written (in real
subprocesses, loopback only) and pass ``mypy --strict`` the way a user's project checks them:
from outside this repository, against the installed package and its ``py.typed``."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from readme_blocks import (
    EXAMPLES,
    GUARD,
    PLACEHOLDER_KEYS,
    README,
    ROOT,
    Block,
    python_blocks,
)

BLOCKS = python_blocks(README.read_text())


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC"))}
    env.update(PLACEHOLDER_KEYS)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(GUARD), env.get("PYTHONPATH")) if p)
    return env


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=90, check=False
    )


def test_the_readme_has_the_blocks_a_user_reads_first() -> None:
    assert len(BLOCKS) >= 6
    short = BLOCKS[0]
    assert "@tool" in short.code
    assert short.not_run is None  # the short example runs as written


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_readme_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    if block.not_run is not None:
        pytest.skip(f"README line {block.line}: not run: {block.not_run}")
    script = tmp_path / f"{block.name}.py"
    script.write_text(block.code)
    done = _run([sys.executable, str(script)], tmp_path)
    assert done.returncode == 0, f"README line {block.line}:\n{done.stderr}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path) -> None:
    done = _run([sys.executable, str(example)], tmp_path)
    assert done.returncode == 0, f"{example.name}:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{example.name} printed nothing"


def test_examples_cover_the_four_stories() -> None:
    assert {e.stem for e in EXAMPLES} >= {"hello", "support_openai", "crash_and_resume",
                                          "approval"}


def test_a_not_run_marker_needs_a_reason() -> None:
    text = (
        "<!-- not run: needs a GPU -->\n```python\nx = 1\n```\n"
        "<!-- not run:  -->\n```python\n```\n"
    )
    first, second = python_blocks(text)
    assert (first.not_run, first.line, first.code) == ("needs a GPU", 2, "x = 1\n")
    assert second.not_run is None  # an empty reason is no marker: the block runs


@pytest.mark.timeout(600)
def test_mypy_strict_passes_on_examples_and_readme_blocks(tmp_path: Path) -> None:
    files = []
    for block in BLOCKS:
        path = tmp_path / f"{block.name}.py"
        path.write_text(block.code)
        files.append(str(path))
    files += [str(e) for e in EXAMPLES]
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # a user's project: none of our settings
    done = _run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", "mypy.ini",
         "--cache-dir", str(tmp_path / ".mypy_cache"), *files],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no issues found in {len(files)} source files" in done.stdout


@pytest.mark.timeout(300)
def test_the_wheel_ships_py_typed(tmp_path: Path) -> None:
    build = (
        "import sys\nfrom hatchling.build import build_wheel\n"
        "print(build_wheel(sys.argv[1]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=True,
    )
    wheel = tmp_path / done.stdout.strip().splitlines()[-1]
    names = zipfile.ZipFile(wheel).namelist()
    assert "threads/py.typed" in names
    assert "threads/testing/fake_providers/openai_fake.py" in names
