"""Request deltas (``threads.store.request_deltas``) in a Postgres store's ``request_deltas``
table, created on first use (a store written before it keeps its requests whole in
``artifacts``, where they are still read).

Writing: an append's requests are based on the request the branch's previous ``model_request``
names. Which one that is, a store remembers per branch by the head it was true at
(``LatestRequests``), so the writer of a branch's last append plans the delta before the
transaction, against the base's bytes in the cache (the head check confirms the head).
Otherwise (another host wrote, a process restarted) the base is looked up inside the append's
transaction, after the head check: the branches' latest ``model_request`` lines, then the
bases' rows, one round trip each for a whole group. The cache holds only requests checked
against their hash that are committed, so a cached base is a row of the table (its foreign key
says so at insert; a base deleted behind the store's back is dropped from the cache and the
append planned again). A request whose base can't be rebuilt is kept whole.

Reading: one recursive query fetches a request's rows back to the nearest cached ancestor, then
``rebuild`` checks the bytes against the address.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.store.protocol import PendingArtifact
from threads.store.request_deltas import (
    COLUMNS,
    INSERT,
    Body,
    Delta,
    Latest,
    LatestRequests,
    RequestCache,
    delta,
    line_request_sha,
    rebuild,
)
from threads.store.statements import POSTGRES

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

INSERT_DELTAS = POSTGRES.render(INSERT)
# The rows of the ``want`` requests and their bases, back to (not including) a ``known`` one.
# UNION drops a row met twice, so a loop of bases (an edited table) ends.
_CHAINS = f"""
WITH RECURSIVE chain AS (
  SELECT {COLUMNS} FROM request_deltas WHERE sha256 = ANY(%(want)s::text[])
  UNION
  SELECT {", ".join("d." + c for c in COLUMNS.split(", "))}
  FROM request_deltas d JOIN chain c ON d.sha256 = c.base_sha256
  WHERE c.sha256 <> ALL(%(known)s::text[]) AND d.sha256 <> ALL(%(known)s::text[])
) SELECT {COLUMNS} FROM chain
"""
_LATEST_LINES = (
    "SELECT b.id, (SELECT e.line FROM events e WHERE e.branch_id = b.id"
    " AND e.type = 'model_request' ORDER BY e.seq DESC LIMIT 1)"
    " FROM unnest(%s::text[]) AS b(id)"
)


@dataclass(slots=True)
class Planned:
    """One append's request artifacts on their way to the table."""

    branch_id: str
    prev_hash: str | None  # the head the append chains to
    requests: list[tuple[str, Body]]  # (sha256, bytes or a rendered request's pieces)
    rows: list[tuple[Any, ...]] | None = None  # to insert, once the base is known


def _rows(planned: Planned, base_sha256: str | None, base: Body | None) -> list[tuple[Any, ...]]:
    if base is None:
        base_sha256 = None
    return [delta(base_sha256, base, data).row(sha) for sha, data in planned.requests]


class PostgresDeltas:
    """A store's request cache and what it remembers of its branches' latest requests."""

    def __init__(self) -> None:
        self.cache = RequestCache()  # committed requests only (see the module docstring)
        self.latest = LatestRequests()

    # ---- writing -------------------------------------------------------------------------

    def plan(
        self, branch_id: str, events: Sequence[Event], requests: list[PendingArtifact]
    ) -> Planned:
        """The append's requests, with their rows made now when the base is known here (a
        request's sha256 is the caller's when it passes one: see ``PendingArtifact``)."""
        prev_hash = events[0].prev_hash if events else None
        planned = Planned(
            branch_id, prev_hash, [(r.sha256 or sha256_hex(r.data), r.content) for r in requests]
        )
        known = None if prev_hash is None else self.latest.at(branch_id, prev_hash)
        if known is not None:
            base = None if known.sha256 is None else self.cache.get(known.sha256)
            if known.sha256 is None or base is not None:
                planned.rows = _rows(planned, known.sha256, base)
        return planned

    async def resolve(
        self, conn: Conn, pipeline: psycopg.AsyncPipeline, planned: Sequence[Planned]
    ) -> None:
        """Make the rows of the appends planned without a base (two round trips for all of
        them, none when there are none): a lone append's inside its transaction, after its head
        check; a group's before its statement, from heads read unlocked
        (``threads.store.postgres.group`` says why that is safe)."""
        todo = [p for p in planned if p.rows is None]
        if not todo:
            return
        cursor = conn.cursor(binary=True)
        await cursor.execute(_LATEST_LINES, ([p.branch_id for p in todo],))
        await pipeline.sync()
        bases = {branch: _named(line) for branch, line in await cursor.fetchall()}
        known = self.cache.snapshot()
        wanted = sorted({b for b in bases.values() if b is not None and b not in known})
        rows = await _chains(conn, pipeline, wanted, known) if wanted else {}
        for p in todo:
            base_sha256 = bases.get(p.branch_id)
            base: Body | None = None
            if base_sha256 is not None:
                base = known.get(base_sha256)
                if base is None:
                    base = self._rebuilt(base_sha256, rows, known)
            p.rows = _rows(p, base_sha256, base)

    def _rebuilt(
        self, sha256: str, rows: Mapping[str, Delta], known: Mapping[str, Body]
    ) -> bytes | None:
        try:
            data = rebuild(sha256, rows.get, known.get)
        except StoreError:  # a damaged base: the new request is kept whole
            return None
        if data is not None:
            self.cache.put(sha256, data)
        return data

    def replan(self, planned: Planned) -> None:
        """The insert found a base gone (deleted behind the store's back): forget it, so the
        next attempt looks the base up in the table."""
        for row in planned.rows or ():
            if row[1] is not None:
                self.cache.drop(row[1])
        planned.rows = None

    def committed(
        self, branch_id: str, events: Sequence[Event], planned: Planned | None
    ) -> None:
        """After an append committed: its requests are rows, and the branch's head moved."""
        saved = [] if planned is None else [sha for sha, _ in planned.requests]
        if planned is not None:
            for sha, data in planned.requests:
                self.cache.put(sha, data)
        if events:
            before = self.latest.at(branch_id, events[0].prev_hash)
            after = LatestRequests.after(before, events, saved)
            if after is not None:
                self.latest.record(after)

    def created(self, branch_id: str, head_hash: str, events: Sequence[Event]) -> None:
        """After a branch was created with ``events`` (its head now ``head_hash``)."""
        after = LatestRequests.after(None, events, ()) if events else None
        self.latest.record(after or Latest(branch_id, head_hash, None, False))

    # ---- reading and importing -----------------------------------------------------------

    async def load(self, conn: Conn, sha256: str) -> bytes | None:
        """The request kept under ``sha256``, rebuilt and checked; None when no row has it."""
        known = self.cache.snapshot()
        async with conn.pipeline() as pipeline:
            rows = await _chains(conn, pipeline, [sha256], known)
        data = rebuild(sha256, rows.get, known.get)
        if data is not None:
            self.cache.put(sha256, data)
        return data

    async def save(self, conn: Conn, data: bytes, base_sha256: str | None) -> None:
        """Keep ``data`` as a delta of request ``base_sha256`` (whole when that is None or
        can't be rebuilt), in the caller's transaction (``cache`` takes it once committed)."""
        base = None
        if base_sha256 is not None:
            try:
                base = await self.load(conn, base_sha256)
            except StoreError:
                base = None
        await conn.execute(INSERT_DELTAS, delta(base_sha256, base, data).row(sha256_hex(data)))


def _named(line: bytes | None) -> str | None:
    """The request a stored ``model_request`` line names (None for a line that can't say)."""
    if line is None:
        return None
    try:
        return line_request_sha(bytes(line))
    except (ValueError, KeyError, TypeError):  # a damaged line: read_chain reports it
        return None


async def _chains(
    conn: Conn, pipeline: psycopg.AsyncPipeline, want: list[str], known: Mapping[str, Body]
) -> dict[str, Delta]:
    cursor = conn.cursor(binary=True)
    await cursor.execute(_CHAINS, {"want": want, "known": list(known)})
    await pipeline.sync()
    return {str(row[0]): Delta.from_row(row[1:]) for row in await cursor.fetchall()}
