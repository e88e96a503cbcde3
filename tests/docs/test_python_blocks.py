"""Every ```python block of the README and the docs pages, and every program in ``examples/``,
runs as written (in a real subprocess, loopback only) and passes ``mypy --strict`` the way a
user's project checks it: from outside this repository, against the installed package and its
``py.typed``."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from doc_blocks import (
    ALL_BLOCKS,
    EXAMPLES,
    PYTHON_BLOCKS,
    README,
    ROOT,
    SHELL,
    SHOWN,
    Block,
    block_env,
    blocks,
)


def _run(argv: list[str], cwd: Path, timeout: int = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=block_env(), capture_output=True, text=True, timeout=timeout,
        check=False,
    )


def test_the_readme_opens_with_a_short_example_that_runs() -> None:
    first = next(b for b in PYTHON_BLOCKS if b.page == README)
    assert "@tool" in first.code
    assert first.not_run is None  # the short example runs as written


def test_every_page_with_code_has_blocks_that_run() -> None:
    """Most examples run: a page may mark a block not run, but not all of them."""
    assert len(PYTHON_BLOCKS) >= 40
    ran = [b for b in PYTHON_BLOCKS if b.not_run is None]
    assert len(ran) >= 0.8 * len(PYTHON_BLOCKS), [b.where for b in PYTHON_BLOCKS if b.not_run]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.where for b in PYTHON_BLOCKS])
def test_python_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    if block.not_run is not None:
        pytest.skip(f"{block.where}: not run: {block.not_run}")
    script = tmp_path / f"{block.name}.py"
    script.write_text(block.code)
    done = _run([sys.executable, str(script)], tmp_path)
    assert done.returncode == 0, f"{block.where}:\n{done.stdout}\n{done.stderr}"


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
        "  ```sh\n  echo indented\n  ```\n"
    )
    first, second, third = blocks(text)
    assert (first.not_run, first.line, first.code) == ("needs a GPU", 2, "x = 1\n")
    assert second.not_run is None  # an empty reason is no marker: the block runs
    assert (third.lang, third.code) == (SHELL, "echo indented\n")  # inside a list item


def test_no_block_escapes_the_checks_by_its_fence() -> None:
    """Code is fenced ```python or ```sh (which run); anything else must be output or data,
    so a ```py or ```bash block can't slip past the tests unrun."""
    unknown = [b.where + f" ```{b.lang}" for b in ALL_BLOCKS
               if b.lang not in {"python", SHELL, *SHOWN}]
    assert not unknown, f"use ```python or ```sh (or a data fence: {sorted(SHOWN)}): {unknown}"


@pytest.mark.timeout(900)
def test_mypy_strict_passes_on_examples_and_doc_blocks(tmp_path: Path) -> None:
    files = []
    for block in PYTHON_BLOCKS:
        path = tmp_path / f"{block.name}.py"
        path.write_text(block.code)
        files.append(str(path))
    files += [str(e) for e in EXAMPLES]
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # a user's project: none of our settings
    done = _run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", "mypy.ini",
         "--cache-dir", str(tmp_path / ".mypy_cache"), *files],
        tmp_path, timeout=840,
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
