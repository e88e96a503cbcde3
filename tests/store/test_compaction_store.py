"""A compacted thread another writer made imports into either store, reads and replays from it;
one that breaks rule 30 is refused whole, at the event that breaks it."""

from __future__ import annotations

import pytest

from compaction_log import CompactionLog
from threads.errors import LogError
from threads.log.fold import Fold
from threads.principal import Principal
from threads.run.replay import replay_branch
from threads.store.bundle import write_bundle
from threads.store.protocol import Store
from threads.store.transfer import import_log

ALICE = Principal("api", "local", "alice")


def _compacted() -> CompactionLog:
    log = CompactionLog()
    first, *_ = log.turn("one", "uno")
    log.turn("two", "dos")
    cause = log.requested("Keep the numbers.")
    request = log.side_request(cause)
    log.respond(request, text="one and two")
    log.compacted(first, log.events[cause.seq - 2], request, "one and two",
                  trigger="manual", cause=cause)
    log.turn("three", "tres")
    return log


async def test_a_compacted_thread_imports_reads_and_replays(store: Store) -> None:
    log = _compacted()
    result = await import_log(store, write_bundle(log.export(), log.artifacts),
                              tenant_id=ALICE.tenant)
    assert (result.head_seq, result.status) == (log.events[-1].seq, "idle")
    chain = await store.read_chain(result.branch_id)
    fold = Fold()
    fold.extend(chain.events)
    assert [role for role, _ in fold.transcript] == ["summary", "user", "assistant"]
    replayed = await replay_branch(store, result.branch_id)
    assert replayed.ok
    assert replayed.requests == 4  # three turns and the summarizer's


async def test_a_side_request_that_names_no_open_request_is_refused(store: Store) -> None:
    log = _compacted()
    cause = next(e for e in log.events if e.type == "compaction_requested")
    log.user("four")
    bad = log.side_request(cause)  # that request was answered already
    with pytest.raises(LogError) as refused:
        await import_log(store, write_bundle(log.export(), log.artifacts),
                         tenant_id=ALICE.tenant)
    assert (refused.value.code, refused.value.seq) == ("invalid_transition", bad.seq)
    assert not await store.list_threads(tenant_id=ALICE.tenant)  # nothing was stored
