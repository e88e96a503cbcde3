"""The demo's fake payments and mail service: a small SQLite ledger of its own, outside the
agent's process, so it survives the worker being killed and its counters are read back rather
than assumed. Charges deduplicate by idempotency key (as a real payments API would); refunds can
be looked up by key; emails are neither deduplicated nor looked up (like plain SMTP)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Counters:
    charges: int
    charge_requests: int
    refunds: int
    emails: int
    max_applications_per_key: int


class DemoService:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS applied (kind TEXT, key TEXT, detail TEXT,"
                " duplicate_of_key INTEGER DEFAULT 0)"
            )

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def charge(self, amount_cents: int, key: str) -> str:
        with self._db() as db:
            seen = db.execute(
                "SELECT detail FROM applied WHERE kind = 'charge' AND key = ?", (key,)
            ).fetchone()
            db.execute(
                "INSERT INTO applied(kind, key, detail, duplicate_of_key) VALUES"
                " ('charge_request', ?, ?, ?)",
                (key, str(amount_cents), int(seen is not None)),
            )
            if seen is not None:
                return str(seen[0])  # the provider deduplicates by idempotency key
            receipt = f"ch_{key[-6:]} charged {amount_cents} cents"
            db.execute(
                "INSERT INTO applied(kind, key, detail) VALUES ('charge', ?, ?)", (key, receipt)
            )
            return receipt

    def refund(self, amount_cents: int, key: str) -> str:
        receipt = f"re_{key[-6:]} refunded {amount_cents} cents"
        with self._db() as db:
            db.execute(
                "INSERT INTO applied(kind, key, detail) VALUES ('refund', ?, ?)", (key, receipt)
            )
        return receipt

    def find_refund(self, key: str) -> str | None:
        with self._db() as db:
            row = db.execute(
                "SELECT detail FROM applied WHERE kind = 'refund' AND key = ?", (key,)
            ).fetchone()
        return None if row is None else str(row[0])

    def send_email(self, to: str, body: str, key: str) -> str:
        with self._db() as db:
            db.execute(
                "INSERT INTO applied(kind, key, detail) VALUES ('email', ?, ?)",
                (key, f"{to}: {body}"),
            )
        return f"sent to {to}"

    def email_sent(self, key: str) -> bool:
        """What an operator checks in the mail server's log before resolving a parked email."""
        with self._db() as db:
            row = db.execute(
                "SELECT 1 FROM applied WHERE kind = 'email' AND key = ?", (key,)
            ).fetchone()
        return row is not None

    def counters(self, branch_id: str | None = None) -> Counters:
        """What was applied (for one thread, when given: its effect keys start with its branch
        id, so a second story in the same directory counts only its own)."""
        prefix = "%" if branch_id is None else f"{branch_id}:%"
        with self._db() as db:

            def count(kind: str) -> int:
                return int(
                    db.execute(
                        "SELECT count(*) FROM applied WHERE kind = ? AND key LIKE ?",
                        (kind, prefix),
                    ).fetchone()[0]
                )

            most = db.execute(
                "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM applied"
                " WHERE kind IN ('charge', 'refund', 'email') AND key LIKE ? GROUP BY kind, key)",
                (prefix,),
            ).fetchone()[0]
            return Counters(
                count("charge"), count("charge_request"), count("refund"), count("email"), int(most)
            )
