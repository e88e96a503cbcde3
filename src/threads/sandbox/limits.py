"""Resource limits of a local sandbox command: rlimits always, a pids cgroup when the host has one.

CPU time (``RLIMIT_CPU``), address space (``RLIMIT_AS``), file size (``RLIMIT_FSIZE``) and open
files (``RLIMIT_NOFILE``) are set on the wrapper before it execs and are inherited by every
process of the command. ``RLIMIT_NPROC`` does not bind a root-owned process, so the number of
processes is capped by a cgroup v1 ``pids`` group per command when ``/sys/fs/cgroup/pids`` is
writable; ``Limits.pids_enforced`` says whether it was.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PIDS_ROOT = Path("/sys/fs/cgroup/pids")


@dataclass(frozen=True, slots=True)
class Limits:
    cpu_seconds: int = 60
    memory_mb: int = 1024
    pids: int = 256
    file_mb: int = 1024
    open_files: int = 1024

    def preexec(self, cgroup: Path | None) -> Callable[[], None]:
        """What the forked wrapper runs before exec: join the pids group, then set rlimits."""
        mb = 1024 * 1024
        pairs = [
            (resource.RLIMIT_CPU, self.cpu_seconds),
            (resource.RLIMIT_AS, self.memory_mb * mb),
            (resource.RLIMIT_FSIZE, self.file_mb * mb),
            (resource.RLIMIT_NOFILE, self.open_files),
        ]
        procs = None if cgroup is None else str(cgroup / "cgroup.procs")

        def apply() -> None:
            if procs is not None:
                with open(procs, "w") as f:
                    f.write("0")
            for which, value in pairs:
                resource.setrlimit(which, (value, value))

        return apply


def pids_cgroup(name: str, limit: int) -> Path | None:
    """A fresh pids group capped at ``limit`` for one command, or None where cgroups are not
    writable (then only the rlimits hold)."""
    base = PIDS_ROOT / "threads"
    try:
        base.mkdir(exist_ok=True)
        group = base / name
        group.mkdir(exist_ok=True)
        (group / "pids.max").write_text(str(limit))
    except OSError:
        return None
    return group


def pids_enforceable() -> bool:
    return os.access(PIDS_ROOT, os.W_OK)


def remove_cgroup(group: Path | None) -> None:
    if group is not None:
        with contextlib.suppress(OSError):
            group.rmdir()
