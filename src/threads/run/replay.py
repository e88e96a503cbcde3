"""Replay of a stored branch: its resolved chain and the artifacts rendering reads, from the
store, then ``threads.log.replay`` (pure). No model is called and nothing is appended.

An artifact the store lacks is left out, so the replay reports ``artifact_missing`` at the event
that needs it; one the store holds damaged is ``artifact_corrupt`` there. The recorded request
artifacts themselves are not needed: their hashes are in the log. Invariant: reading only.
"""

from __future__ import annotations

from threads.errors import StoreError
from threads.log.replay import Replayed, ReplayMismatch, first_use, needed_artifacts, replay
from threads.store.protocol import Store


async def replay_branch(store: Store, branch_id: str) -> Replayed:
    chain = await store.read_chain(branch_id)
    events = chain.events
    artifacts: dict[str, bytes] = {}
    for sha256 in needed_artifacts(events):
        try:
            artifacts[sha256] = await store.get_artifact(sha256)
        except StoreError as exc:
            if exc.code == "artifact_corrupt":
                # everything before its first use still replays; the damage is reported there
                at = first_use(events, sha256)
                before = replay(events[:at], artifacts)
                if not before.ok:
                    return before
                event = events[at]
                return Replayed(before.requests, ReplayMismatch(
                    "artifact_corrupt", event.seq, f"{event.type} references artifact {sha256},"
                    f" which the store holds damaged: {exc.message}",
                ))
            if exc.code != "artifact_missing":
                raise
    return replay(events, artifacts)
