"""What every CLI command shares: the ``--store`` option, opening a store, and error reports.

Invariant: a command never prints a traceback for bad input. Every refusal becomes one
``error: <code> at seq <seq>: <message>`` line and one ``hint:`` line on stderr, exit code 1.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from threads.errors import ConfigError, NotFound, ThreadsError
from threads.store.protocol import Store
from threads.store.sqlite import sqlite

DEFAULT_STORE = ".threads"
POSTGRES_SCHEMES = ("postgres://", "postgresql://")

_HINTS = {
    "not_found": "run `threads ls --store DIR` to see the threads this store holds",
    "log_corrupt": "run `threads verify --store DIR` to locate the damage; the branch can"
    " still be exported for inspection, or restored from an earlier export",
    "seq_conflict": "this store already holds that branch with other lines; import into"
    " another store (--store) instead",
    "unsupported_format": "open it with the threads release that wrote it",
    "unsupported_critical_event": "open it with the newer threads release that wrote it",
    "invalid_config": "check the command's arguments (run it with --help)",
    "request_hash_mismatch": "the recorded request is not what the log before it renders: the"
    " log or an artifact changed after it was written, or another renderer wrote it; run"
    " `threads replay THREAD_ID` and compare the request's artifact",
    "prefix_changed": "a request declares another line 0 than its settings epoch renders; the"
    " pinned config or a settings_changed was altered after the request was written",
    "artifact_missing": "the store lacks an artifact the log references; import it, or restore"
    " the store from a backup",
    "artifact_corrupt": "an artifact the log references is damaged; restore it from a backup",
}
_LOG_HINT = (
    "the file is not a valid threads export from that seq on; export the branch again from"
    " its store, or pass a different file"
)
_LOG_CODES = frozenset(
    {"invalid_line", "invalid_transition", "seq_mismatch", "prev_hash_mismatch", "head_mismatch"}
)


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="DIR|URL",
        help=f"store directory (default {DEFAULT_STORE}) or a postgres://... URL",
    )


def store_from_spec(spec: str | None, *, create: bool) -> Store:
    """A store for ``--store``: a ``postgres://``/``postgresql://`` URL opens the shared
    Postgres store, anything else a SQLite directory. Reading commands refuse a directory that
    holds no store rather than creating an empty one there."""
    spec = spec or DEFAULT_STORE
    if spec.startswith(POSTGRES_SCHEMES):
        return _postgres_store(spec)
    if not create and not (Path(spec) / "threads.db").is_file():
        raise NotFound(f"no threads store at {spec} (no {spec}/threads.db)")
    return sqlite(spec)


def _postgres_store(url: str) -> Store:
    try:
        from threads.store.postgres import postgres
    except ImportError:
        raise ConfigError(
            "invalid_config",
            "Postgres stores need the threads[postgres] extra: pip install 'threads[postgres]'",
        ) from None
    return postgres(url)


def database_errors() -> tuple[type[Exception], ...]:
    """The database errors a command reports in two lines: SQLite's, and psycopg's once a
    Postgres store was opened (psycopg is never imported just to catch its errors)."""
    psycopg = sys.modules.get("psycopg")
    return (sqlite3.Error,) if psycopg is None else (sqlite3.Error, psycopg.Error)


@asynccontextmanager
async def opened_store(spec: str | None, *, create: bool = False) -> AsyncIterator[Store]:
    store = store_from_spec(spec, create=create)
    try:
        yield store
    finally:
        await store.close()


def describe(error: ThreadsError) -> str:
    where = f" at seq {error.seq}" if error.seq is not None else ""
    return f"{error.code}{where}: {error.message}"


def report(error: ThreadsError) -> None:
    print(f"error: {describe(error)}", file=sys.stderr)
    print(f"hint: {hint(error.code)}", file=sys.stderr)


def hint(code: str) -> str:
    """What to do next about an error with this code."""
    found = _LOG_HINT if code in _LOG_CODES else _HINTS.get(code)
    return found or "run `threads --help` for usage"


def report_os_error(error: OSError) -> None:
    code = "not_found" if isinstance(error, FileNotFoundError) else "invalid_argument"
    name = f": {error.filename}" if error.filename else ""
    print(f"error: {code}: {error.strerror or error}{name}", file=sys.stderr)
    print("hint: check the path and its permissions", file=sys.stderr)


def report_database_error(error: Exception) -> None:
    if isinstance(error, sqlite3.Error):
        print(f"error: log_corrupt: the store's database cannot be read ({error})", file=sys.stderr)
        print("hint: check that --store names a threads store directory", file=sys.stderr)
        return
    lines = str(error).strip().splitlines()
    reason = lines[0] if lines else type(error).__name__
    print(f"error: unavailable: the Postgres store cannot be used ({reason})", file=sys.stderr)
    print("hint: check the URL given to --store and that the server answers", file=sys.stderr)


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2
