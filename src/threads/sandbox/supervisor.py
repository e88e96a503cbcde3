"""Supervisor records: the durable proof of which host processes a keyed command became.

Before a keyed command may run, its record names it (``spawning``, with the marker its wrapper
carries in argv); once the wrapper exists, blocked, the record gains the wrapper's and the pid
namespace init's ``(pid, start time)`` and the process group (``running``); only then is the
command let go. Records live on the host beside the workspace, never inside it, so a command
can't forge them. ``prove_gone`` answers from them: every process of a command lives in its own
pid namespace, and the kernel ends the whole namespace when its init dies, so "the init and the
wrapper are gone" proves "every process of the command is gone".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

from threads.log.hashing import sha256_hex
from threads.sandbox.durable import DIR_MODE, write_durably
from threads.sandbox.procs import ProcessId, find_by_argv, is_alive, kill, wait_gone
from threads.sandbox.protocol import Termination

KILL_PROOF_S = 5.0


def key_hash(process_key: str) -> str:
    return sha256_hex(process_key.encode("utf-8"))[:32]


def marker(process_key: str) -> str:
    """What the wrapper's argv carries (as its hostname) so a half-written record still finds it."""
    return f"threads-{key_hash(process_key)}"


class RecordJson(TypedDict):
    """A record as its file holds it; a process id is ``[pid, start_ticks]``."""

    process_key: str
    state: str
    wrapper: NotRequired[list[int] | None]
    init: NotRequired[list[int] | None]
    pgid: NotRequired[int | None]
    pid_namespace: NotRequired[int | None]
    exit_code: NotRequired[int | None]


@dataclass(frozen=True, slots=True)
class Record:
    process_key: str
    state: str  # spawning | running | exited
    wrapper: ProcessId | None = None
    init: ProcessId | None = None
    pgid: int | None = None
    pid_namespace: int | None = None
    exit_code: int | None = None

    def to_json(self) -> RecordJson:
        def pid(p: ProcessId | None) -> list[int] | None:
            return None if p is None else [p.pid, p.start_ticks]

        return {
            "process_key": self.process_key,
            "state": self.state,
            "wrapper": pid(self.wrapper),
            "init": pid(self.init),
            "pgid": self.pgid,
            "pid_namespace": self.pid_namespace,
            "exit_code": self.exit_code,
        }

    @staticmethod
    def from_json(value: RecordJson) -> Record:
        def pid(v: list[int] | None) -> ProcessId | None:
            return None if v is None else ProcessId(int(v[0]), int(v[1]))

        return Record(
            process_key=str(value["process_key"]),
            state=str(value["state"]),
            wrapper=pid(value.get("wrapper")),
            init=pid(value.get("init")),
            pgid=value.get("pgid"),
            pid_namespace=value.get("pid_namespace"),
            exit_code=value.get("exit_code"),
        )


class Records:
    """The records of one sandbox, one file per process key, each replaced atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, process_key: str) -> Path:
        return self.directory / f"{key_hash(process_key)}.json"

    def write(self, record: Record) -> None:
        """Write ``record`` durably (0600). The directory is made if missing, but never its
        sandbox: a sandbox deleted underneath is ``FileNotFoundError``, not half made again."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.directory, DIR_MODE)
        write_durably(self.path(record.process_key), json.dumps(record.to_json()).encode())

    def read(self, process_key: str) -> Record | None:
        try:
            value = json.loads(self.path(process_key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        record = Record.from_json(value)
        if record.process_key != process_key:
            return None  # a hash collision is not this command
        return record

    def all(self) -> list[Record]:
        if not self.directory.is_dir():
            return []
        out = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                out.append(Record.from_json(json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, KeyError):
                continue
        return out


def live_processes(record: Record) -> list[ProcessId]:
    """The command's processes that may still be running, by the record's proof."""
    if record.state == "spawning":
        return find_by_argv(marker(record.process_key).encode("ascii"))
    return [p for p in (record.init, record.wrapper) if p is not None]


def prove_gone(record: Record | None) -> Termination:
    """Stop what is left of the command and answer from proof. No record: the command never
    started (its record is written before it may run)."""
    if record is None:
        return "already_exited"
    processes = live_processes(record)
    if not wait_gone(processes, 0):
        # The namespace init first: its death takes every process of the command with it.
        for process in processes:
            kill(process)
        if record.pgid is not None and record.wrapper is not None:
            _kill_group(record)
        return "terminated" if wait_gone(processes, KILL_PROOF_S) else "unknown"
    return "already_exited"


def _kill_group(record: Record) -> None:
    # The group id is the wrapper's pid: signal it only while that wrapper is still alive, so a
    # reused pid's group is never hit.
    assert record.wrapper is not None
    assert record.pgid is not None
    if is_alive(record.wrapper):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pgid, signal.SIGKILL)
