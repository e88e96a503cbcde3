"""Faults of a store's environment as coded ``StoreError``s, for every engine.

A locked database, a read-only directory, a full disk, a damaged database file or a lost server
connection are not damage to the log: each gets its own code (``store_busy``,
``store_read_only``, ``store_full``, ``store_corrupt``, ``store_unavailable``) and a message that
says what to do. Invariant: no raw ``sqlite3``/``psycopg``/``OSError`` leaves a store method for
a fault of its environment, and none of them is ever reported as ``log_corrupt``.
"""

from __future__ import annotations

import errno
import sqlite3

from threads.errors import StoreError

_ADVICE = {
    "store_busy": "another process holds the database's write lock; run the command again"
    " once it is done",
    "store_read_only": "the store cannot be written here (read-only file, directory or"
    " database); check its permissions, or copy the store somewhere writable",
    "store_full": "the disk (or the database's size limit) is full; free space and run again:"
    " nothing half-written was kept",
    "store_corrupt": "the database file is damaged or is not a threads store (truncated,"
    " overwritten); restore it from a backup or re-import its exports",
    "store_unavailable": "the store could not be reached; check that it exists (the path or"
    " URL given to --store) and that the server answers, then run again",
}

# SQLite primary result codes (the low byte of the extended code) and what they mean here.
_SQLITE_CODES = {
    5: "store_busy",  # SQLITE_BUSY
    6: "store_busy",  # SQLITE_LOCKED
    8: "store_read_only",  # SQLITE_READONLY
    10: "store_unavailable",  # SQLITE_IOERR
    11: "store_corrupt",  # SQLITE_CORRUPT
    13: "store_full",  # SQLITE_FULL
    14: "store_unavailable",  # SQLITE_CANTOPEN
    23: "store_read_only",  # SQLITE_AUTH
    26: "store_corrupt",  # SQLITE_NOTADB
}

_ERRNO_CODES = {
    errno.ENOSPC: "store_full",
    errno.EDQUOT: "store_full",
    errno.EROFS: "store_read_only",
    errno.EACCES: "store_read_only",
    errno.EPERM: "store_read_only",
}


def fault(code: str, detail: str) -> StoreError:
    """A ``StoreError`` of one of the fault codes above, with its advice."""
    return StoreError(code, f"{detail}; {_ADVICE[code]}")


def sqlite_fault(exc: sqlite3.Error) -> StoreError:
    code = getattr(exc, "sqlite_errorcode", None)
    name = _SQLITE_CODES.get(code & 0xFF) if isinstance(code, int) else None
    if name is None:
        name = _classify_message(str(exc))
    return fault(name, f"SQLite: {exc}")


def os_fault(exc: OSError) -> StoreError:
    name = _ERRNO_CODES.get(exc.errno or 0, "store_unavailable")
    where = f" ({exc.filename})" if exc.filename else ""
    return fault(name, f"{exc.strerror or exc}{where}")


def _classify_message(message: str) -> str:
    text = message.lower()
    if "locked" in text or "busy" in text:
        return "store_busy"
    if "readonly" in text or "read-only" in text:
        return "store_read_only"
    if "full" in text:
        return "store_full"
    if "malformed" in text or "not a database" in text:
        return "store_corrupt"
    return "store_unavailable"
