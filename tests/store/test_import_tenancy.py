"""Importing into ids another tenant owns, on both stores: a stranger's import of a thread
(or of a branch) this store keeps for another tenant is ``forbidden`` and writes nothing, with
the same words whether the stranger's bytes are identical, different, a fork of that thread, or
another thread reusing one of its branch ids: the refusal says the id is not theirs to write,
never whose it is nor what it holds.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_bundle_hostile import stored_artifacts

from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.ids import uuid7
from threads.log.lines import make_header
from threads.store.bundle import write_bundle
from threads.store.protocol import Store
from threads.store.transfer import export_branch, import_log
from threads.testing.sample_log import SampleLog

OWNER = "acme"
STRANGER = "globex"


def _owned(clock: FakeClock) -> SampleLog:
    log = SampleLog(clock)
    log.started()
    log.turn(text="mine", reply="yes")
    log.snapshot()
    return log


def _rewritten(clock: FakeClock, thread_id: str, branch_id: str) -> SampleLog:
    """Another log whose header names ``thread_id`` and ``branch_id``."""
    log = SampleLog(clock)
    log.header = make_header(thread_id, branch_id, clock.now_ms())
    log.started()
    log.turn(text="theirs", reply="no")
    return log


def _attempts(clock: FakeClock, owned: SampleLog) -> dict[str, bytes]:
    fork = owned.fork()
    fork.turn(text="a fork of it")
    same_thread = _rewritten(clock, owned.header.thread_id, uuid7(clock.now_ms()))
    same_branch = _rewritten(clock, uuid7(clock.now_ms()), owned.header.branch_id)
    return {
        "identical": write_bundle(owned.export(), owned.artifacts),
        "identical_plain": owned.export(),
        "other_lines_same_thread": write_bundle(same_thread.export(), same_thread.artifacts),
        "fork_of_it": write_bundle(fork.export(), {**owned.artifacts, **fork.artifacts}),
        "other_thread_same_branch_id": same_branch.export(),
    }


@pytest.mark.parametrize(
    "attempt",
    ["identical", "identical_plain", "other_lines_same_thread", "fork_of_it",
     "other_thread_same_branch_id"],
)
async def test_a_stranger_importing_into_another_tenants_ids_is_forbidden_and_writes_nothing(
    store: Store, clock: FakeClock, attempt: str
) -> None:
    owned = _owned(clock)
    await import_log(store, write_bundle(owned.export(), owned.artifacts), tenant_id=OWNER)
    before = await export_branch(store, owned.header.branch_id)
    artifacts = stored_artifacts(store)
    data = _attempts(clock, owned)[attempt]

    with pytest.raises(StoreError) as caught:
        await import_log(store, data, tenant_id=STRANGER)

    assert caught.value.code == "forbidden"
    message = caught.value.message
    assert OWNER not in message  # never whose it is
    assert message.endswith(
        f"can't be imported for tenant {STRANGER}: this store already uses one of its ids for a"
        " thread that tenant can't write; nothing was imported. Import it into another store,"
        " or as the tenant that owns it."
    )
    assert await store.list_threads(STRANGER) == []
    assert [b.branch_id for b in await store.list_branches(owned.header.thread_id)] == [
        owned.header.branch_id
    ]
    assert await export_branch(store, owned.header.branch_id) == before
    assert stored_artifacts(store) == artifacts


async def test_the_owner_reimporting_is_still_a_no_op(store: Store, clock: FakeClock) -> None:
    owned = _owned(clock)
    data = write_bundle(owned.export(), owned.artifacts)
    assert (await import_log(store, data, tenant_id=OWNER)).stored
    assert not (await import_log(store, data, tenant_id=OWNER)).stored
    fork = owned.fork()
    fork.turn(text="a fork of it")
    bundle = write_bundle(fork.export(), {**owned.artifacts, **fork.artifacts})
    assert (await import_log(store, bundle, tenant_id=OWNER)).stored


@pytest.mark.parametrize("attempt", ["identical", "other_lines_same_thread"])
async def test_a_stranger_overtaken_by_the_owner_between_check_and_write_is_forbidden(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, attempt: str
) -> None:
    """The stranger's import checks the ids (free), then the owner's import lands, then the
    stranger's write runs: it finds the owner's branch (identical bytes) or breaks the
    engine's constraint (other bytes); either way the answer is ``forbidden``, not a no-op
    that tells the stranger the bytes match, nor a constraint error."""
    owned = _owned(clock)
    data = _attempts(clock, owned)[attempt]
    write = store.store_segment

    async def owner_first(*args: Any, **kwargs: Any) -> bool:
        monkeypatch.setattr(store, "store_segment", write)
        await import_log(store, write_bundle(owned.export(), owned.artifacts), tenant_id=OWNER)
        return await write(*args, **kwargs)

    monkeypatch.setattr(store, "store_segment", owner_first)
    with pytest.raises(StoreError) as caught:
        await import_log(store, data, tenant_id=STRANGER)
    assert caught.value.code == "forbidden"
    assert await store.list_threads(STRANGER) == []
    assert [b.tenant_id for b in await store.list_branches(owned.header.thread_id)] == [OWNER]
