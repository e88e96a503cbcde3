"""``mypy --strict`` on a program a test writes: the typing tests check what mypy says about a
user's code (the log's vocabulary, the public API's generics) the way a user's CI would.

The programs of one test process share mypy's cache, so threads and its dependencies are
analysed once per process rather than once per program (about 3 s of CPU each). mypy checks
each cached module's source hash, and every program is a new file, so each is checked anew.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from functools import cache
from pathlib import Path


@cache
def _shared_cache() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="threads-mypy-cache-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


def strict_mypy(tmp_path: Path, source: str, name: str = "user_program") -> tuple[int, list[str]]:
    """mypy's exit status and output lines for ``source`` saved as ``<name>.py``."""
    from mypy import api

    program = tmp_path / f"{name}.py"
    program.write_text(source, encoding="utf-8")
    out, _, status = api.run([
        "--strict", "--cache-dir", str(_shared_cache()),
        "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
        str(program),
    ])
    return status, out.splitlines()
