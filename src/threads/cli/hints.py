"""What the CLI tells a person to do next, and every command it suggests.

A suggested command is built by ``command(name, *words)`` from values this invocation knows (a
thread id, a challenge, an args hash), each quoted for the shell, with the options that say
where and as whom this invocation ran (``--store``, ``--tenant``, ``--issuer``, ``--subject``)
carried over when the suggested command takes them, so it runs as printed. A store URL's
password is never printed (the suggestion then relies on ``PGPASSWORD`` or ``~/.pgpass``, as
libpq does). A hint that would need a value this invocation doesn't know names no command and
says what to do in words; no hint gives Python advice.
Invariant: every ``threads <command>`` the CLI prints is a ``command(...)``: in a sentence it
stands between backticks, on a line of its own it runs to the end of the line
(``tests/cli/test_cli_hints.py`` runs each one as printed).
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

CARRIED = ("store", "tenant", "issuer", "subject")  # where and as whom a command runs


@dataclass(frozen=True, slots=True)
class Invocation:
    """The command being run: its parsed arguments and every command's parser (to know which
    options a suggested command takes, and their defaults)."""

    args: argparse.Namespace
    parsers: Mapping[str, argparse.ArgumentParser]

    def value(self, dest: str) -> str | None:
        found = getattr(self.args, dest, None)
        return found if isinstance(found, str) else None


_current: ContextVar[Invocation | None] = ContextVar("threads_cli_invocation", default=None)


@contextmanager
def invoked(
    args: argparse.Namespace, parsers: Mapping[str, argparse.ArgumentParser]
) -> Iterator[None]:
    """While the command named by ``args`` runs, suggestions carry its options."""
    token = _current.set(Invocation(args, parsers))
    try:
        yield
    finally:
        _current.reset(token)


def known(dest: str) -> str | None:
    """A value this invocation was given (``thread``, ``store``, ...), or None."""
    invocation = _current.get()
    return invocation.value(dest) if invocation is not None else None


def thread() -> str | None:
    """The thread (or branch) id this invocation names, if it names one."""
    return known("thread") or known("thread_id")


def command(name: str, *words: str) -> str:
    """``threads NAME WORDS...`` plus the carried options the command takes, as one shell line."""
    line = ["threads", name, *words]
    invocation = _current.get()
    parser = invocation.parsers.get(name) if invocation is not None else None
    if invocation is not None and parser is not None:
        for action in parser._actions:
            value = invocation.value(action.dest)
            if action.dest in CARRIED and action.option_strings and value is not None and (
                value != action.default
            ):
                line += [action.option_strings[0], _printable(action.dest, value)]
    return shlex.join(line)


def quoted(name: str, *words: str) -> str:
    """``command`` between backticks, to stand in a sentence."""
    return f"`{command(name, *words)}`"


def _printable(dest: str, value: str) -> str:
    """``value`` as printed: a store URL without its password."""
    if dest != "store" or "://" not in value:
        return value
    parts = urlsplit(value)
    if parts.password is None:
        return value
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port is not None else ""
    netloc = f"{user}@{host}{port}" if user else f"{host}{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def this_help() -> str:
    """The ``--help`` of the command being run (of ``threads`` outside a command)."""
    name = known("command")
    return f"`threads {name} --help`" if name else "`threads --help`"


def _about_thread(name: str, what: str, otherwise: str) -> str:
    """``run `threads NAME THREAD` WHAT`` when the thread is known, else ``otherwise``."""
    named = thread()
    return f"run {quoted(name, named)} {what}" if named else otherwise


def next_step(code: str) -> str:
    """What to do next about an error with this code (``not_found`` of a thread: see
    ``threads.cli.support.hint`` for a store that isn't there)."""
    if code in _LOG_CODES:
        return (
            "the file is not a valid threads export from that seq on; export the branch again"
            " from its store, or pass a different file"
        )
    if code == "not_found":
        return f"run {quoted('ls')} to see the threads this store holds"
    if code == "log_corrupt":
        return (
            f"run {quoted('verify')} to locate the damage; the branch can still be exported"
            " with --inspect to look at its bytes, or restored from an earlier export"
        )
    if code == "branch_busy":
        return _about_thread(
            "lease", "to see who holds it and until when",
            "a run holds the thread; run the command again once it stopped",
        )
    if code == "not_parked":
        return _about_thread(
            "timeline", "to see what the thread is waiting on", "check the id you passed"
        )
    if code in ("not_pending", "approval_duplicate"):
        return _about_thread("approvals", "to see what waits for a decision", "check the id")
    if code == "approval_mismatch":
        return _about_thread(
            "approvals", "and pass the args hash shown there", "pass the args hash you were shown"
        )
    if code == "request_hash_mismatch":
        return (
            "the recorded request is not what the log before it renders: the log or an artifact"
            " changed after it was written, or another renderer wrote it; "
            + _about_thread(
                "replay", "and compare the request's artifact", "replay the thread to compare"
            )
        )
    if code == "artifact_missing":
        return (
            "the store lacks an artifact the log references: export the branch as a bundle"
            " (--bundle) from the store that holds its artifacts and import that bundle, or"
            f" restore the store from a backup; {quoted('verify')} lists what is missing"
        )
    if code in ("invalid_config", "invalid_argument"):
        return f"check the command's arguments ({this_help()})"
    return _FIXED.get(code) or f"run {this_help()} for usage"


_LOG_CODES = frozenset(
    {"invalid_line", "invalid_transition", "seq_mismatch", "prev_hash_mismatch", "head_mismatch"}
)
_FIXED = {
    "seq_conflict": "this store already holds that branch with other lines; import into"
    " another store (--store) instead",
    "unsupported_format": "open it with the threads release that wrote it",
    "unsupported_critical_event": "open it with the newer threads release that wrote it",
    "forbidden": "act as the principal who started the thread, or one of its approvers"
    " (--issuer/--tenant/--subject)",
    "prefix_changed": "a request declares another line 0 than its settings epoch renders; the"
    " pinned config or a settings_changed was altered after the request was written",
    "decision_contradicts_policy": "a call ran that the thread's pinned permission policy"
    " holds back (a run with a looser policy, or an edited log): review that call's effect,"
    " and continue the conversation in a new thread rather than this one",
    "approval_expired": "the call counts as denied; run the thread again to continue",
    "artifact_corrupt": "an artifact the log references is damaged: restore it by importing a"
    " bundle of this branch, or from a backup",
    "store_busy": "another process is writing to this store; run the command again shortly",
    "store_read_only": "check the store's file permissions, or work on a writable copy",
    "store_full": "free disk space (nothing half-written was kept), then run again",
    "store_corrupt": "the database file is damaged: restore it from a backup, or import its"
    " bundles into a new store",
    "store_unavailable": "check the path or URL given to --store and that the server answers",
    "import_too_large": "check that the file is an export; raise --max-bytes if it really is one",
    "holder_may_be_running": "resolve it --assume-done now, or --assume-not-done after the time"
    " given",
}
