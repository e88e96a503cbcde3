"""Every ```sh block of the README and the docs pages that can run offline runs: a page's
blocks in order, as one shell session (a variable a block sets is there for the next, as in a
reader's terminal), in a scratch directory, under ``bash -euo pipefail``, with this
environment's ``threads`` and ``python`` first on PATH and the network guard in every Python
process. A block that can't run here says why (``<!-- not run: REASON -->``)."""

from __future__ import annotations

import subprocess
from itertools import groupby
from pathlib import Path

import pytest
from doc_blocks import ROOT, SHELL_BLOCKS, Block, block_env

MARK = "@@ docs block "
PAGES: list[tuple[Path, list[Block]]] = [
    (page, list(group)) for page, group in groupby(SHELL_BLOCKS, key=lambda b: b.page)
]


def test_most_shell_blocks_run() -> None:
    ran = [b for b in SHELL_BLOCKS if b.not_run is None]
    assert len(ran) >= 10, "the docs show commands a reader can run: run them"


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "page_blocks", [b for _, b in PAGES], ids=[str(p.relative_to(ROOT)) for p, _ in PAGES]
)
def test_shell_blocks_of_a_page_run_in_order(page_blocks: list[Block], tmp_path: Path) -> None:
    runnable = [b for b in page_blocks if b.not_run is None]
    if not runnable:
        pytest.skip("every shell block of this page says why it is not run")
    session = "\n".join(f"echo '{MARK}{b.where}' >&2\n{b.code}" for b in runnable)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", session], cwd=tmp_path, env=block_env(),
        capture_output=True, text=True, timeout=540, check=False, stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        where = [line[len(MARK):] for line in done.stderr.splitlines() if line.startswith(MARK)]
        failed = next(b for b in runnable if b.where == where[-1])
        pytest.fail(
            f"{failed.where} exited {done.returncode}:\n{failed.code}\n--- stdout\n"
            f"{done.stdout}\n--- stderr\n{done.stderr}"
        )
