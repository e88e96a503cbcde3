"""``write_durably``: replace a host file so that a crash leaves either the old bytes or the new.

Written to a temporary name in the same directory, fsynced, renamed over the target, and the
directory fsynced: what the sandbox's supervisor records and snapshot refs rely on.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
