"""Who holds a lease: the process identity a store records as a lease's ``holder_id``.

A holder id names the run (a UUID) and the process driving it: the host (Linux boot id and
hostname), the pid namespace, the pid and the process's start time (clock ticks since boot, from
``/proc/<pid>/stat``, so a reused pid is never mistaken for the holder). With it a store can tell
a dead holder from a live one *without waiting for its lease to expire*: a holder on this host
(same boot id, hostname and pid namespace) whose pid no longer runs the process that started it
is provably gone, and nothing it could still write or send exists.

The same identity in a form a file name can carry (``file_tag``: a digest of the host, the pid
and its start time) lets the writer of a temporary file be judged the same way (``writer_gone``).

A store keeps one lease row per branch, so the next acquire overwrites who held it. What was
proven about the holders before is carried in the new holder id instead (``gone``: the epochs of
the branch whose holder was provably gone when a later holder took the lease, ``succeeding``),
so a person resolving a park long after the takeover still acts on the proof that a holder that
dispatched a call is dead (``gone_epochs``). A holder id written elsewhere carries none: no
proof, the zombie window stands.

A holder in this very process is alive while its run goes on; once the run ended without its
lease released (the release could not be written: ``ended``), it is gone too.

Invariant: ``provably_gone`` (and ``writer_gone``) answers True only on proof. A holder on another
host, in another pid namespace, on a system without ``/proc``, one whose id this module did not
write (another implementation's), or one whose state can't be read is treated as alive until
its lease expires.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

PROC = Path("/proc")
_FORMAT = "threads.holder/1"
# ``/proc/<pid>/stat`` states of a process that can no longer run (zombie, dead).
_ENDED_STATES = frozenset("ZXx")
KEPT_GONE = 16  # how many proven-gone epochs a holder id carries forward
# Runs of this process that ended while the store still records their lease (``ended``).
_ended_runs: set[str] = set()


@dataclass(frozen=True, slots=True)
class Host:
    """This machine (and pid namespace) as a holder records it; ``boot_id`` None off Linux."""

    boot_id: str | None
    hostname: str
    pid_namespace: str | None


@dataclass(frozen=True, slots=True)
class Holder:
    """A parsed holder id. ``run`` is the caller's own id for the run (or the whole raw id
    when the holder id was not written by this module: then nothing else is known)."""

    run: str
    host: Host | None = None
    pid: int | None = None
    start_ticks: int | None = None
    gone: tuple[int, ...] = ()  # earlier epochs whose holder was proven gone (``succeeding``)

    def encode(self) -> str:
        assert self.host is not None
        fields: dict[str, object] = {
            "boot": self.host.boot_id,
            "format": _FORMAT,
            "host": self.host.hostname,
            "pid": self.pid,
            "pidns": self.host.pid_namespace,
            "run": self.run,
            "start": self.start_ticks,
        }
        if self.gone:
            fields["gone"] = list(self.gone)
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    def describe(self) -> str:
        """``pid 4242 on host web-1`` (or the raw id of a holder we can't read)."""
        if self.host is None or self.pid is None:
            return f"holder {self.run!r}"
        return f"pid {self.pid} on host {self.host.hostname}"


@cache
def this_host() -> Host:
    return Host(_read(PROC / "sys/kernel/random/boot_id"), socket.gethostname(), _pid_namespace())


def this_process(run: str) -> Holder:
    """The holder identity of this process running ``run``."""
    pid = os.getpid()
    return Holder(run, this_host(), pid, process_start_ticks(pid))


def holder_id(run: str) -> str:
    """What a store records for this process holding a lease for ``run``: the encoded
    identity, or ``run`` unchanged when it already is one (re-acquiring by the same id)."""
    if parse(run).host is not None:
        return run
    return this_process(run).encode()


def parse(raw: str) -> Holder:
    """The holder a stored id names; an id not written here is kept whole as ``run``."""
    try:
        value = json.loads(raw)
    except ValueError:
        return Holder(raw)
    if not isinstance(value, dict) or value.get("format") != _FORMAT:
        return Holder(raw)
    pid, start, gone = value.get("pid"), value.get("start"), value.get("gone")
    host = Host(_text(value.get("boot")), str(value.get("host")), _text(value.get("pidns")))
    return Holder(
        str(value.get("run")),
        host,
        pid if isinstance(pid, int) else None,
        start if isinstance(start, int) else None,
        tuple(e for e in gone if isinstance(e, int)) if isinstance(gone, list) else (),
    )


def provably_gone(holder: Holder) -> bool:
    """True only when ``holder`` ran on this host, in this pid namespace, and its process is
    no longer running (no such pid, a zombie, or another process reusing the pid), or it is
    a run of this process that ended (``ended``)."""
    here = this_host()
    if holder.host is None or holder.pid is None or holder.start_ticks is None:
        return False
    if here.boot_id is None or here.pid_namespace is None or holder.host != here:
        return False
    if _in_this_process(holder):
        return holder.run in _ended_runs
    return _ended(holder.pid, holder.start_ticks)


def ended(holder_id: str) -> None:
    """The run of this process that held a lease as ``holder_id`` is over, though its lease
    may still be recorded (its release could not be written): from now on that holder is
    provably gone. A holder id of another process is ignored."""
    holder = parse(holder_id)
    if _in_this_process(holder):
        _ended_runs.add(holder.run)


def _in_this_process(holder: Holder) -> bool:
    me = this_process(holder.run)
    return (holder.host, holder.pid, holder.start_ticks) == (me.host, me.pid, me.start_ticks)


def succeeding(holder_id: str, previous_id: str, previous_epoch: int) -> str:
    """``holder_id`` (encoded) as it takes a branch's lease from ``previous_id`` (the row's
    holder, of ``previous_epoch``): carrying the earlier holders proven gone, and the previous
    one too when it is provably gone now. The last ``KEPT_GONE`` epochs are kept: an epoch
    dropped is one whose proof is lost (treated as alive), never one wrongly proven."""
    holder, previous = parse(holder_id), parse(previous_id)
    if holder.host is None:
        return holder_id
    gone = set(previous.gone)
    if provably_gone(previous):
        gone.add(previous_epoch)
    kept = tuple(sorted(gone)[-KEPT_GONE:])
    return holder_id if kept == holder.gone else replace(holder, gone=kept).encode()


def gone_epochs(holder_id: str, epoch: int) -> frozenset[int]:
    """The epochs of a branch whose holders are proven gone, read from its lease row (holder
    ``holder_id`` of ``epoch``): those the row carries, and its own when that holder is gone."""
    holder = parse(holder_id)
    return frozenset(holder.gone) | ({epoch} if provably_gone(holder) else set())


def file_tag() -> str:
    """This process as a temporary file's name records its writer: ``<host>-<pid>-<start>``,
    the host a digest of ``this_host()`` (``x`` for what is unknown: never proof)."""
    return _tag(os.getpid())


@cache
def _tag(pid: int) -> str:  # by pid: a forked child has its own
    start = process_start_ticks(pid)
    return f"{_host_digest(this_host())}-{pid}-{'x' if start is None else start}"


def writer_gone(tag: str) -> bool | None:
    """Whether the writer ``tag`` names (see ``file_tag``) no longer runs: True only on proof,
    False when it runs (or can't be inspected), None when it can't be judged here (another
    host or pid namespace, or a tag this module did not write)."""
    digest, pid, start = [*tag.split("-"), "", ""][:3]
    here = this_host()
    if here.boot_id is None or here.pid_namespace is None or digest != _host_digest(here):
        return None
    if not (pid.isdigit() and start.isdigit()):
        return None
    return _ended(int(pid), int(start))


def _host_digest(host: Host) -> str:
    raw = json.dumps([host.boot_id, host.hostname, host.pid_namespace])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _ended(pid: int, start_ticks: int) -> bool:
    """Whether ``pid`` no longer runs the process that started at ``start_ticks``."""
    if pid == os.getpid():
        return False  # this process: alive by definition
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists and belongs to someone else: read its stat to see if it is the one
    stat = _stat(pid)
    if stat is None:
        return False  # it exists but can't be inspected (e.g. /proc mounted hidepid)
    state, start = stat
    return state in _ENDED_STATES or start != start_ticks


def process_start_ticks(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[1]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) from ``/proc/<pid>/stat``."""
    raw = _read(PROC / str(pid) / "stat")
    if raw is None:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink(PROC / "self/ns/pid")
    except OSError:
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
