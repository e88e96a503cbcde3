"""Request deltas (``threads.store.request_deltas``) in a SQLite store's ``request_deltas`` table.

Everything here runs on the store thread inside the caller's transaction. The cache may hold a
request whose write then rolled back, so a cached request is served only while its row is there.
"""

from __future__ import annotations

import sqlite3

from threads.log.hashing import sha256_hex
from threads.store import request_deltas
from threads.store.request_deltas import Body, Delta, RequestCache
from threads.store.statements import LATEST_REQUEST_LINE

_ROW = f"SELECT {request_deltas.COLUMNS} FROM request_deltas WHERE sha256 = ?"


def _row(conn: sqlite3.Connection, sha256: str) -> Delta | None:
    row = conn.execute(_ROW, (sha256,)).fetchone()
    return None if row is None else Delta.from_row(row[1:])


def load(conn: sqlite3.Connection, cache: RequestCache, sha256: str) -> bytes | None:
    """The request stored under ``sha256``, rebuilt and checked; None when no row has it."""
    data = request_deltas.rebuild(sha256, lambda sha: _row(conn, sha), cache.get)
    if data is not None:
        cache.put(sha256, data)
    return data


def save(
    conn: sqlite3.Connection,
    cache: RequestCache,
    data: Body,
    base_sha256: str | None,
    *,
    base_held: bool = False,
    sha256: str | None = None,
) -> str:
    """Keep request ``data`` as a delta against request ``base_sha256`` (whole when that is
    None or not kept here); a no-op when it is already stored. ``base_held``: the caller knows
    the base's row is stored, so a cached copy of the base is used without looking the row up;
    ``sha256``: the hash of ``data`` when the caller has it. Runs inside the caller's
    transaction; returns the request's sha256."""
    sha256 = sha256_hex(bytes(data)) if sha256 is None else sha256
    base: Body | None = None
    if base_sha256 is not None:
        base = cache.get(base_sha256) if base_held else None
        if base is None:
            base = load(conn, cache, base_sha256)
    d = request_deltas.delta(base_sha256 if base is not None else None, base, data)
    conn.execute(request_deltas.INSERT, d.row(sha256))
    cache.put(sha256, data)
    return sha256


def previous_request(conn: sqlite3.Connection, branch_id: str) -> str | None:
    """The sha256 of the request the branch's latest ``model_request`` names, if any."""
    row = conn.execute(LATEST_REQUEST_LINE, (branch_id,)).fetchone()
    return None if row is None else request_deltas.line_request_sha(row[0])


def stored(conn: sqlite3.Connection) -> list[str]:
    """Every request kept here, oldest first (for ``threads materialize``)."""
    return [str(sha) for (sha,) in conn.execute("SELECT sha256 FROM request_deltas ORDER BY rowid")]
