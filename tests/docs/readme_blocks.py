"""The README's fenced ```python blocks, as the docs tests run and type-check them.

A block runs as written unless the line right before its fence is
``<!-- not run: REASON -->`` (then it is only type-checked, and REASON must say why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
GUARD = Path(__file__).resolve().parent / "guard"
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.*\S.*) -->$")
# Adapters read keys from the environment when they are built (nothing is sent then); blocks
# that build one get placeholders, as a user's shell would hold real keys.
PLACEHOLDER_KEYS = {"OPENAI_API_KEY": "sk-placeholder", "ANTHROPIC_API_KEY": "sk-placeholder"}


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    code: str
    not_run: str | None  # why it is only type-checked, when it is

    @property
    def name(self) -> str:
        return f"readme_line_{self.line}"


def python_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            i += 1
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            marker = NOT_RUN.match(lines[start - 1].strip()) if start > 0 else None
            reason = marker.group("reason") if marker else None
            blocks.append(Block(start + 1, "\n".join(body) + "\n", reason))
        i += 1
    return blocks
