"""Snapshots at turn boundaries: the fork points of a thread with a sandbox.

When the agent asks for snapshots, a turn that ended (``turn_completed``) with the workspace
changed since the branch's last snapshot gets one: captured quiescent, proven to restore to the
same manifest (``threads.sandbox.ledger.Owner.snapshot``), ledgered, and only then recorded as a
``snapshot`` event. A sandbox that can't capture now (``not_quiescent``, ``unavailable``, a full
disk: ``no_space``) leaves that turn without a fork point: the turn keeps its outcome, the
failure is logged with its code (logger ``threads``), its ledger row is settled and what it
wrote is removed; the run goes on.
"""

from __future__ import annotations

import logging

from threads.log.lines import Draft
from threads.log.vocabulary import (
    data_of,
)
from threads.run.drafts import HOST
from threads.run.runtime import Runtime
from threads.sandbox.protocol import SandboxError

log = logging.getLogger("threads")


async def snapshot_turn(rt: Runtime) -> None:
    sandbox = rt.sandbox
    if sandbox is None or not rt.spec.snapshots or rt.fold.turn is not None:
        return
    if sandbox.last_manifest is None:
        chain = await rt.writer.store.read_chain(rt.writer.branch_id)
        recorded = [
            data_of(e, "snapshot")["manifest_hash"] for e in chain.events if e.type == "snapshot"
        ]
        sandbox.last_manifest = recorded[-1] if recorded else ""
    try:
        snapshot = await sandbox.snapshot_if_changed(sandbox.last_manifest)
    except SandboxError as exc:
        log.warning(
            "thread %s: no snapshot at this turn's end (%s): %s; the turn keeps its outcome",
            rt.writer.thread_id, exc.code, exc.message,
        )
        return
    if snapshot is None:
        return
    await rt.writer.append([Draft("snapshot", snapshot.event_data(), HOST)])
    sandbox.last_manifest = snapshot.manifest_hash
