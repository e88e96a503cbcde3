"""``mypy --strict`` on a program a test writes: the typing tests check what mypy says about a
user's code (the log's vocabulary, the public API's generics) the way a user's CI would."""

from __future__ import annotations

import sys
from pathlib import Path


def strict_mypy(tmp_path: Path, source: str, name: str = "user_program") -> tuple[int, list[str]]:
    """mypy's exit status and output lines for ``source`` saved as ``<name>.py``."""
    from mypy import api

    program = tmp_path / f"{name}.py"
    program.write_text(source, encoding="utf-8")
    out, _, status = api.run([
        "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
        "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
        str(program),
    ])
    return status, out.splitlines()
