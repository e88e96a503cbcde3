"""Host process identity from ``/proc``: a pid plus its start time names one process for good.

A pid alone can be reused after its process dies, so every liveness question here is asked of
``(pid, start_ticks)``: the process is alive only if ``/proc/<pid>/stat`` exists, is not a
zombie, and still carries the recorded start time. Nothing here trusts anything a sandboxed
command could write; it reads only the host kernel's view.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

PROC = "/proc"


@dataclass(frozen=True, slots=True)
class ProcessId:
    pid: int
    start_ticks: int


def read_stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, pgid, start_ticks)`` of ``pid`` now, or None when there is no such process."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name sits in parentheses and may itself hold spaces or parentheses.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[2]), int(fields[19])


def identify(pid: int) -> ProcessId | None:
    stat = read_stat(pid)
    return None if stat is None else ProcessId(pid, stat[2])


def is_alive(process: ProcessId) -> bool:
    stat = read_stat(process.pid)
    if stat is None:
        return False
    state, _, start = stat
    # A zombie has finished (and, as a pid namespace's init, only after all its members did).
    return start == process.start_ticks and state not in ("Z", "X")


def kill(process: ProcessId) -> None:
    """SIGKILL ``process`` if it is still that very process (start time checked first)."""
    if is_alive(process):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, signal.SIGKILL)


def wait_gone(processes: list[ProcessId], within_s: float) -> bool:
    """True once none of ``processes`` is alive; False if some still are after ``within_s``.
    This polls the kernel for an exit we caused, it never waits for a lease or a window."""
    deadline = time.monotonic() + within_s
    while True:
        if not any(is_alive(p) for p in processes):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def find_by_argv(marker: bytes) -> list[ProcessId]:
    """Processes whose ``argv[0]`` ends in ``bwrap`` and whose argv holds ``marker``: the
    sandbox wrappers of one command, found when a crash cut its record short."""
    found: list[ProcessId] = []
    for name in os.listdir(PROC):
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC}/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if argv and argv[0].endswith(b"bwrap") and marker in argv:
            process = identify(int(name))
            if process is not None and is_alive(process):
                found.append(process)
    return found
