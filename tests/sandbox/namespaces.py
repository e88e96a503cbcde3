"""Test helper: which host processes live in a pid namespace (the kernel's view, read from
``/proc/<pid>/ns/pid``; nothing a sandboxed command could write)."""

from __future__ import annotations

import os

from threads.sandbox.procs import read_stat


def live_members(namespace: int) -> list[int]:
    """Live (not zombie) host pids in pid namespace ``namespace``."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            link = os.readlink(f"/proc/{name}/ns/pid")
        except OSError:
            continue
        stat = read_stat(int(name))
        if link == f"pid:[{namespace}]" and stat is not None and stat[0] not in "ZX":
            pids.append(int(name))
    return pids
