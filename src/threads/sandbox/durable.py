"""``write_durably``: replace a host file so that a crash leaves either the old bytes or the new.

Written to a temporary name in the same directory (``.<name>.<pid>.tmp``), fsynced, renamed over
the target, and the directory fsynced: what the sandbox's supervisor records and snapshot refs
rely on. A writer killed before its rename leaves its temporary file behind;
``remove_orphaned_temps`` deletes those, for a caller that knows no writer is active there.
"""

from __future__ import annotations

import os
from pathlib import Path

_TEMP = ".tmp"


def write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}{_TEMP}")
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


def remove_orphaned_temps(directory: Path) -> None:
    """Delete the temporary files of ``write_durably`` calls that died in ``directory``. Only
    while no ``write_durably`` can be running there (under the lock every writer takes)."""
    for tmp in directory.glob(f".*{_TEMP}"):
        tmp.unlink(missing_ok=True)
