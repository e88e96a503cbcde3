"""The resource ledger and gc over a real store (SQLite, and Postgres when its server answers
on 127.0.0.1:5432) and the real local sandbox."""

from __future__ import annotations

from typing import Any, Literal, cast

import pytest

from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.ids import uuid7
from threads.log.lines import make_header
from threads.sandbox import SandboxContext, SandboxError
from threads.sandbox.bubblewrap import LocalSandbox
from threads.sandbox.gc import collect
from threads.sandbox.ledger import DEFAULT_LIFETIME_MS, Owner
from threads.sandbox.local_session import LocalSession
from threads.store.capabilities import resources_of
from threads.store.protocol import Lease, Store
from threads.store.resources import ResourceStore


async def _branch(store: Store) -> str:
    now = store.clock.now_ms()
    header = make_header(uuid7(now), uuid7(now), now)
    await store.create_branch(header, tenant_id="acme")
    return header.branch_id


def _owner(store: Store, sandbox: LocalSandbox, lease: Lease) -> Owner:
    async def fence() -> None:
        await store.check_lease(lease)

    return Owner(resources_of(store), sandbox, store.clock, "acme", lambda: lease,
                 SandboxContext(fence))


def _clock(store: Store) -> FakeClock:
    assert isinstance(store.clock, FakeClock)
    return store.clock


class Crashing(LocalSandbox):
    """Creates for real, then loses the answer (a crash or a dropped connection)."""

    def __init__(self, base: LocalSandbox, store: Store, fail: str = "unavailable"):
        super().__init__(base.root, base.limits)
        self.store = store
        self.fail = fail
        self.seen_pending: list[str] = []

    async def create(self, operation_key: str, ctx: SandboxContext) -> LocalSession:
        rows = await resources_of(self.store).resources()
        self.seen_pending += [r.state for r in rows if r.operation_key == operation_key]
        await super().create(operation_key, ctx)
        raise SandboxError(self.fail, "the answer was lost")  # type: ignore[arg-type]


async def test_the_pending_row_commits_before_the_create_and_a_lost_answer_is_found(
    store: Store, provider: LocalSandbox
) -> None:
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    crashing = Crashing(provider, store)
    owner = _owner(store, crashing, lease)
    session = await owner.sandbox_session()  # the lost answer is found by its key
    assert crashing.seen_pending == ["pending"]
    rows = await resources_of(store).resources()
    assert [(r.kind, r.state, r.ref) for r in rows] == [("sandbox", "live", session.id)]
    assert provider.sandbox_ids() == [session.id]


async def _crashed_create(store: Store, provider: LocalSandbox, lease: Lease) -> LocalSession:
    """What a run that crashed creating a sandbox left: the pending row and the sandbox."""
    key = uuid7(store.clock.now_ms())
    await resources_of(store).resource_pending(
        operation_key=key, tenant_id="acme", provider="local", kind="sandbox", lease=lease
    )
    owner = await resources_of(store).owner_identity()
    return await provider.create(key, SandboxContext(_never_refuses, owner=owner))


async def _next_owners_sandbox(store: Store, provider: LocalSandbox, branch: str) -> str:
    """The sandbox the branch's next owner works in, once the crashed one's lease lapsed."""
    _clock(store).advance(31_000)
    taken = await store.acquire_lease(branch, "w2", 30_000)
    return (await _owner(store, provider, taken).sandbox_session()).id


async def test_a_create_the_crash_never_recorded_is_adopted_by_the_next_owner(
    store: Store, provider: LocalSandbox
) -> None:
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    made = await _crashed_create(store, provider, lease)
    assert await _next_owners_sandbox(store, provider, branch) == made.id
    assert provider.sandbox_ids() == [made.id]
    assert [r.state for r in await resources_of(store).resources()] == ["live"]


async def test_a_snapshot_scratch_a_crash_left_is_released_not_adopted(
    store: Store, provider: LocalSandbox
) -> None:
    """A crash while a snapshot was being proven leaves the scratch sandbox it was restoring
    into, its row pending, beside the branch's live sandbox. The next owner keeps working in
    the branch's own sandbox and releases the scratch."""
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    working = await _owner(store, provider, lease).sandbox_session()
    scratch = await _crashed_create(store, provider, lease)
    assert await _next_owners_sandbox(store, provider, branch) == working.id
    assert provider.sandbox_ids() == [working.id]
    states = {r.ref: r.state for r in await resources_of(store).resources()}
    assert states == {working.id: "live", scratch.id: "released"}


async def _never_refuses() -> None:
    return None


async def test_a_stale_owner_creates_nothing(store: Store, provider: LocalSandbox) -> None:
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    _clock(store).advance(31_000)
    await store.acquire_lease(branch, "w2", 30_000)
    with pytest.raises(StoreError) as err:
        await _owner(store, provider, lease).sandbox_session()
    assert err.value.code == "stale_epoch"
    assert provider.sandbox_ids() == []
    assert await resources_of(store).resources() == []


async def test_a_typed_create_failure_releases_the_row(
    store: Store, provider: LocalSandbox
) -> None:
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    with pytest.raises(SandboxError):
        await _owner(store, Crashing(provider, store, "permission_denied"), lease).create()
    rows = await resources_of(store).resources()
    assert [(r.state, r.release_outcome) for r in rows] == [("released", "not_found")]


async def test_a_nonfinal_lookup_leaves_the_row_unknown(
    store: Store, provider: LocalSandbox
) -> None:
    class Nonfinal(Crashing):
        async def lookup(
            self, kind: Literal["sandbox", "snapshot"], key: str, ctx: SandboxContext
        ) -> str | None:
            return None

    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    sandbox = Nonfinal(provider, store)
    object.__setattr__(sandbox, "_info", type(provider.info)(
        "local", "enforced", ("filesystem",), "confirmed", "nonfinal", "final"))
    with pytest.raises(SandboxError) as err:
        await _owner(store, sandbox, lease).create()
    assert err.value.code == "resource_unknown"
    assert [r.state for r in await resources_of(store).resources()] == ["unknown"]


async def test_gc_releases_only_what_no_run_needs(
    store: Store, provider: LocalSandbox
) -> None:
    resources = resources_of(store)
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    owner = _owner(store, provider, lease)
    kept = await owner.sandbox_session()
    snap = await owner.snapshot(kept)
    await resources.resource_pending(operation_key=uuid7(1), tenant_id="acme", provider="local",
                                     kind="sandbox", lease=lease)
    report = await collect(resources, {"local": provider}, store.clock)
    assert report.released == []
    assert report.skipped_pending == 1
    assert provider.sandbox_ids() == [kept.id]

    _clock(store).advance(DEFAULT_LIFETIME_MS + 1)
    report = await collect(resources, {"local": provider}, store.clock)
    assert len(report.released) == 1  # the idle sandbox; not the pending row, not the snapshot
    assert provider.sandbox_ids() == []
    # A fork point outlives its sandbox's idleness: the old code released it with the sandbox.
    assert (provider.root / "snapshots" / "refs" / f"{snap.snapshot_id}.json").exists()
    states = sorted(r.state for r in await resources.resources())
    assert states == ["live", "pending", "released", "released"]  # + the proof's scratch

    await store.set_branch_state(branch, "fork_failed")  # the branch can never run again
    report = await collect(resources, {"local": provider}, store.clock)
    assert len(report.released) == 1
    assert not (provider.root / "snapshots" / "refs" / f"{snap.snapshot_id}.json").exists()
    again = await collect(resources, {"local": provider}, store.clock)
    assert again.released == []


async def test_gc_loses_to_a_run_that_touches_its_sandbox(
    store: Store, provider: LocalSandbox
) -> None:
    resources = resources_of(store)
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    session = await _owner(store, provider, lease).sandbox_session()
    _clock(store).advance(DEFAULT_LIFETIME_MS + 1)
    lease = await store.acquire_lease(branch, "w2", 30_000)  # the next run of the branch

    class TouchedMidGc:
        """The ledger, but the run attaches again right after gc claimed the row."""

        def __getattr__(self, name: str) -> Any:
            return getattr(resources, name)

        async def resource_claim(self, key: str, claim: str, *, now: int) -> bool:
            won = await resources.resource_claim(key, claim, now=now)
            await _owner(store, provider, lease).sandbox_session()
            return won

    touched = cast(ResourceStore, TouchedMidGc())
    report = await collect(touched, {"local": provider}, store.clock)
    assert report.released == []
    assert report.lost_claims == [(await resources.resources())[0].operation_key]
    assert provider.sandbox_ids() == [session.id]
    assert [r.state for r in await resources.resources()] == ["live"]


async def test_gc_collects_what_a_failed_fork_or_a_deleted_branch_owned(
    store: Store, provider: LocalSandbox
) -> None:
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    await _owner(store, provider, lease).sandbox_session()
    await store.set_branch_state(branch, "fork_failed")
    report = await collect(resources_of(store), {"local": provider}, store.clock)
    assert len(report.released) == 1
    assert provider.sandbox_ids() == []


async def test_illegal_moves_are_refused(store: Store, provider: LocalSandbox) -> None:
    branch = await _branch(store)
    lease = await store.acquire_lease(branch, "w1", 30_000)
    resources = resources_of(store)
    await resources.resource_pending(operation_key="k", tenant_id="acme", provider="local",
                                     kind="sandbox", lease=lease)
    await resources.resource_move("k", "not_found", lease=lease)
    for move in ("found", "release", "unresolved"):
        with pytest.raises(StoreError):
            await resources.resource_move("k", move, lease=lease)  # type: ignore[arg-type]
    with pytest.raises(StoreError) as err:
        await resources.resource_move("k", "released", claim="not-mine")
    assert err.value.code == "cleanup_claim_lost"
    with pytest.raises(StoreError) as err:
        await resources.resource_pending(operation_key="k2", tenant_id="other", provider="local",
                                         kind="sandbox", lease=lease)
    assert err.value.code == "stale_epoch"
