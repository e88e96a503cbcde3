"""Idempotency receipts (``run_receipts``): what a host answered to a keyed request, kept so a
retry of the same request gets the same answer and never starts a second run.

A receipt is written as a companion of the append that records the run's ``user_input``: one
transaction, so a receipt exists exactly when its run's input is durable. Its key is
``(tenant_id, operation, idempotency_key)``; a second insert of a taken key rolls the whole
append back (``idempotency_key_reused``), and the caller reads the winner's receipt again.
The column names and the ``operation`` and ``principal_key`` spellings are the ones the
TypeScript implementation reads, so both hosts can share one store.
"""

from __future__ import annotations

from dataclasses import dataclass

from threads.errors import StoreError

START_RUN = "start_run"


@dataclass(frozen=True, slots=True)
class RunReceipt:
    tenant_id: str
    operation: str
    idempotency_key: str
    principal_key: str
    body_hash: str
    thread_id: str
    branch_id: str
    run_id: str
    created_at: int

    def row(self) -> tuple[str | int, ...]:
        return (
            self.tenant_id,
            self.operation,
            self.idempotency_key,
            self.principal_key,
            self.body_hash,
            self.thread_id,
            self.branch_id,
            self.run_id,
            self.created_at,
        )


def principal_key(issuer: str, tenant: str, subject: str) -> str:
    """``issuer/tenant/subject`` with ``%`` then ``/`` escaped in each part, so no two
    principals share a key."""
    return "/".join(p.replace("%", "%25").replace("/", "%2F") for p in (issuer, tenant, subject))


def receipt_from_row(row: tuple[object, ...]) -> RunReceipt:
    t = [str(v) for v in row[:8]]
    created_at = row[8]
    assert isinstance(created_at, int)
    return RunReceipt(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], created_at)


def key_taken(receipt: RunReceipt) -> StoreError:
    return StoreError(
        "idempotency_key_reused",
        f"Idempotency-Key {receipt.idempotency_key!r} was taken by a concurrent request;"
        " read its receipt and answer from it",
    )
