"""The fenced code blocks of the README and of every page under ``docs/``, as the docs tests run
and type-check them.

A ```python block runs as written (and is type-checked with ``mypy --strict``); a ```sh block
runs in ``bash -euo pipefail`` with the page's other shell blocks, in order, in one scratch
directory, the way a reader follows the page. A block whose fence follows the line
``<!-- not run: REASON -->`` is not run (a python block is still type-checked), and REASON must
say why. Other fences (```text, ```json, ...) are output or data and are never run.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
GUARD = Path(__file__).resolve().parent / "guard"
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.*\S.*) -->$")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[A-Za-z0-9_+-]*)\s*$")
PYTHON, SHELL = "python", "sh"
# Fences that hold output, data or a file's text: shown, never run.
SHOWN = {"text", "json", "jsonl", "yaml", "toml", "ini", "http", "systemd", "sql", "diff"}
# Adapters read keys from the environment when they are built (nothing is sent then); blocks
# that build one get placeholders, as a user's shell would hold real keys.
PLACEHOLDER_KEYS = {"OPENAI_API_KEY": "sk-placeholder", "ANTHROPIC_API_KEY": "sk-placeholder"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    not_run: str | None  # why it is not run, when it is not

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def name(self) -> str:
        """A name that is also a valid, unique Python module name."""
        stem = re.sub(r"[^A-Za-z0-9]+", "_", str(self.page.relative_to(ROOT).with_suffix("")))
        return f"{stem.strip('_').lower()}_line_{self.line}"


def blocks(text: str, page: Path = README) -> list[Block]:
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, indent = i, fence.group("indent")
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        marker = NOT_RUN.match(lines[start - 1].strip()) if start > 0 else None
        reason = marker.group("reason") if marker else None
        found.append(Block(page, start + 1, fence.group("lang"), "\n".join(body) + "\n", reason))
        i += 1
    return found


ALL_BLOCKS = [b for page in PAGES for b in blocks(page.read_text(), page)]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.lang == PYTHON]
SHELL_BLOCKS = [b for b in ALL_BLOCKS if b.lang == SHELL]


def block_env() -> dict[str, str]:
    """What a docs block runs with: this interpreter's ``bin`` first on PATH (``threads``,
    ``python``), placeholder keys, no real ones, and the network guard loaded everywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC"))}
    env.update(PLACEHOLDER_KEYS)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(GUARD), env.get("PYTHONPATH")) if p)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["NO_MKDOCS_2_WARNING"] = "1"
    env["PORT"] = str(_free_port())  # a page that serves something listens here, not on 8787
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
