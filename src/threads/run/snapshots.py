"""Snapshots at turn boundaries: the fork points of a thread with a sandbox.

When the agent asks for snapshots, a turn that ended (``turn_completed``) with the workspace
changed since the branch's last snapshot gets one: captured quiescent, proven to restore to the
same manifest (``threads.sandbox.ledger.Owner.snapshot``), ledgered, and only then recorded as a
``snapshot`` event. A sandbox that can't capture now (``not_quiescent``, ``unavailable``) leaves
that turn without a fork point; the run goes on.
"""

from __future__ import annotations

from threads.run.drafts import HOST, Draft
from threads.run.runtime import Runtime
from threads.sandbox.protocol import SandboxError


async def snapshot_turn(rt: Runtime) -> None:
    sandbox = rt.sandbox
    if sandbox is None or not rt.spec.snapshots or rt.fold.turn is not None:
        return
    if sandbox.last_manifest is None:
        chain = await rt.writer.store.read_chain(rt.writer.branch_id)
        recorded = [e.data["manifest_hash"] for e in chain.events if e.type == "snapshot"]
        sandbox.last_manifest = recorded[-1] if recorded else ""
    try:
        snapshot = await sandbox.snapshot_if_changed(sandbox.last_manifest)
    except SandboxError:
        return
    if snapshot is None:
        return
    await rt.writer.append([Draft("snapshot", snapshot.event_data(), HOST)])
    sandbox.last_manifest = snapshot.manifest_hash
