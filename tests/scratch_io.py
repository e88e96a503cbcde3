"""What the suite's processes skip that no test can observe: disk flushes and recompiling.

The stores fsync every commit, and on this project's machine a disk flush is most of what a
store test costs. No test cuts the power, so none can tell a flushed commit from one the
kernel or the server still holds: a SIGKILLed process (what the drills do) loses neither.
And the suite starts hundreds of Python processes that import threads; where
``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it everywhere) each compiled the
package again, about a second of CPU each. So, for the test process and every process it
starts:

- scratch files (``tmp_path``, ``tempfile``) go to ``/dev/shm`` when it is a writable tmpfs
  that allows executables, unless ``TMPDIR`` is set already (a developer's choice wins);
- Postgres sessions run with ``synchronous_commit=off`` (through ``PGOPTIONS``, which libpq
  reads) unless ``PGOPTIONS`` sets it: a commit is visible to every session at once, as
  always, and reaches the disk a moment later;
- Python writes its bytecode caches (``__pycache__``, ignored by git), as it does by default.

The code under test makes the same calls either way; only the kernel's and the server's work
behind them is lighter. ``THREADS_TEST_AS_IS=1`` leaves the environment as it is.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

TMPFS = Path("/dev/shm")


def _tmpfs_usable(path: Path) -> bool:
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        return False
    flags = os.statvfs(path).f_flag
    return not flags & (os.ST_NOEXEC | os.ST_RDONLY)


def use_scratch_io() -> None:
    """Scratch files on a tmpfs, unflushed Postgres commits, bytecode cached (see above)."""
    if os.environ.get("THREADS_TEST_AS_IS") == "1":
        return
    if "TMPDIR" not in os.environ and _tmpfs_usable(TMPFS):
        os.environ["TMPDIR"] = str(TMPFS)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    options = os.environ.get("PGOPTIONS", "")
    if "synchronous_commit" not in options:
        os.environ["PGOPTIONS"] = f"{options} -c synchronous_commit=off".strip()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False  # pytest caches the test modules it rewrites, too
