"""The ``fork`` kind: import a log, fork it at the case's event, and check the child.

Per case: a fresh SQLite store on the case's clock, ``import_log``, then ``Thread.fork`` at
``input.fork_at_event_id`` with ``input.new_branch_id`` and ``input.knowledge_policy``,
restoring through ``FakeProvider``, which plays ``sandbox.json``'s snapshots: the
``restore_sandbox_id`` it creates, the tree it restores (``manifest``: its hash is what the
restored sandbox reports), and ``restore_response``: ``ok``, ``lost`` (created, the answer never
arrives) or ``crash`` (the restore succeeds, then the host dies before the child's fork event is
appended: the store takes no further write, the runner reopens it once the child's lease lapsed
and runs recovery, ``abandon_interrupted_forks`` and gc). Compared: the outcome /
``error{code, seq}``, the appended events on the child (exact count and order, ``data``
deep-subset), ``fork.child_created`` (a child that may run) / ``at_seq`` / ``parent_unchanged``
(the parent's export is byte-identical before and after) / ``knowledge_revision`` and
``child_state`` (the child's fold), and the state of the parent as a reader. A case that pins
``resources`` forks through the resource ledger (the provider as a ``Sandbox``, whose
``create_lookup`` says whether a lost create is found again by its key) and compares its create
count and the ledger rows the fork left; otherwise the provider restores through a plain
restore function, with no ledger to find a lost create in.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from recover import _compare_appended, _lines, _principal
from runner import (
    Case,
    CaseSkipped,
    Expected,
    _compare_error,
    _compare_state,
    load_expected,
    load_script,
)

from threads.clock import FakeClock
from threads.errors import NotFoundError, ThreadsError
from threads.log.hashing import value_hash
from threads.log.lines import Event
from threads.run.fork import FORK_LEASE_TTL_MS, abandon_interrupted_forks
from threads.run.thread import Thread
from threads.sandbox.gc import collect
from threads.sandbox.protocol import SandboxError, SandboxInfo, SnapshotData
from threads.store.capabilities import resources_of
from threads.store.protocol import Store
from threads.store.sqlite import SQLiteStore
from threads.store.transfer import export_branch, import_log

NOT_RUNNABLE = frozenset({"forking", "fork_failed"})  # a child in these states never runs


def run_fork(case: Case) -> Expected:
    expected = load_expected(case)
    sandbox = load_script(case, "sandbox_script", "sandbox.json")
    if sandbox is None and expected.doc["outcome"] == "ok":
        raise CaseSkipped(
            f"data missing: case.json names {case.spec.get('sandbox_script')}, which is not in"
            " the vendored case, and the child's sandbox_id can only come from its restore"
        )
    with tempfile.TemporaryDirectory(prefix="threads-fork-") as tmp:
        asyncio.run(_run(case, expected, sandbox or {}, Path(tmp)))
    return expected


class HostCrashError(BaseException):
    """The host process dies here: no handler of the code under test runs, nothing is written."""


class CrashableStore(SQLiteStore):
    """The case's store, which dies with the host when ``crash_at_fork`` is armed: the append
    that would finish the fork raises ``HostCrashError``, and every later write does too."""

    armed = False
    dead = False

    def _check_alive(self) -> None:
        if self.dead:
            raise HostCrashError("the host is dead: no write reaches the store")

    async def append(self, branch_id: str, events: Any, *args: Any, **kwargs: Any) -> Any:
        self._check_alive()
        if self.armed and kwargs.get("finishes_fork"):
            self.dead = True
            raise HostCrashError("the host died before the child's fork event was appended")
        return await super().append(branch_id, events, *args, **kwargs)

    async def set_branch_state(self, branch_id: str, state: str) -> None:
        self._check_alive()
        await super().set_branch_state(branch_id, state)

    async def renew_lease(self, lease: Any, ttl_ms: int) -> Any:
        self._check_alive()
        return await super().renew_lease(lease, ttl_ms)

    async def release_lease(self, lease: Any) -> None:
        self._check_alive()
        await super().release_lease(lease)


async def _run(case: Case, expected: Expected, sandbox: dict[str, Any], tmp: Path) -> None:
    now = case.spec["clock"]["now"]
    data = case.log_path().read_bytes()
    store: Store = CrashableStore(tmp / "store", clock=FakeClock(now))
    ledgered = "resources" in expected.doc
    provider = FakeProvider(sandbox, _snapshot_provider(data), store)
    try:
        imported = await import_log(store, data, tenant_id=_principal(_lines(data)).tenant)
        parent = await store.get_branch(imported.branch_id)
        before = await export_branch(store, parent.branch_id)
        if "state" in expected.doc:
            _compare_state(expected, (await store.read_chain(parent.branch_id)).fold(now).state())
        thread = Thread(store, imported.thread_id)
        spec = case.spec["input"]
        child_id: str | None = None
        try:
            child_id = await thread.fork(
                spec["fork_at_event_id"],
                provider if ledgered else provider.restore_plain,
                new_branch_id=spec.get("new_branch_id"),
                knowledge_policy=spec.get("knowledge_policy", "pinned"),
            )
        except HostCrashError:
            store = await _restart(store, tmp, now, provider if ledgered else None)
        except ThreadsError as err:
            _compare_error(expected, err)
        else:
            assert expected.doc["outcome"] == "ok", f"fork succeeded, expected {expected.doc}"
        if provider.crashed:
            assert expected.doc["outcome"] == "ok", (
                f"the host crashed and recovery ran, expected {expected.doc}")
        branches = await store.list_branches(imported.thread_id)
        runnable = [b for b in branches
                    if b.branch_id != parent.branch_id and b.state not in NOT_RUNNABLE]
        fork = expected.doc.get("fork", {})
        if "child_created" in fork:
            assert bool(runnable) == fork["child_created"], (
                f"child creation differs: {[(b.branch_id, b.state) for b in branches]}")
        if "parent_unchanged" in fork:
            unchanged = await export_branch(store, parent.branch_id) == before
            assert unchanged == fork["parent_unchanged"], f"parent unchanged: {unchanged}"
        appended: list[Event] = []
        if child_id is not None:
            child = await store.read_chain(child_id)
            appended = child.segments[-1].events
            if "at_seq" in fork:
                assert child.branch.fork_at_seq == fork["at_seq"], "fork at_seq differs"
            if "knowledge_revision" in fork:
                revision = child.fold(now).knowledge_revision
                assert revision == fork["knowledge_revision"], (
                    f"knowledge_revision {revision}, expected {fork['knowledge_revision']}"
                )
            if "child_state" in fork:
                assert child.fold(now).state() == fork["child_state"], "child state differs"
        else:
            assert "child_state" not in fork, "the case pins a child_state, but no child exists"
        _compare_appended(expected.doc.get("appended", []), appended)
        if ledgered:
            rows = await resources_of(store).resources()
            got = {"creates": provider.creates,
                   "rows": [{"kind": r.kind, "state": r.state} for r in rows]}
            assert got == expected.doc["resources"], f"resources {got}"
    finally:
        await store.close()


async def _restart(dead: Store, tmp: Path, now: int, provider: FakeProvider | None) -> Store:
    """The host comes back once the crashed fork's lease lapsed (the clock is moved, never
    waited on) and runs recovery: interrupted forks are failed, gc releases what they held."""
    await dead.close()
    clock = FakeClock(now + FORK_LEASE_TTL_MS + 1)
    store = SQLiteStore(tmp / "store", clock=clock)
    await abandon_interrupted_forks(store)
    if provider is not None:
        await collect(resources_of(store), {provider.info.provider: provider}, clock)
    return store


def _snapshot_provider(data: bytes) -> str:
    return next(str(e["data"]["provider"]) for e in _lines(data) if e["type"] == "snapshot")


def tree_hash(manifest: list[dict[str, Any]]) -> str:
    """What a restored tree's manifest hashes to (``threads.sandbox.manifest``'s format)."""
    return value_hash({"entries": manifest, "format": "threads.manifest/1"})


class FakeProvider:
    """``sandbox.json``'s snapshots as a sandbox provider. Each restore creates
    ``restore_sandbox_id`` holding the script's ``manifest`` tree (the snapshot's own tree when
    the script gives none), then answers by ``restore_response``; ``create_lookup`` says
    whether the operation key finds a created sandbox again. ``release`` frees what it made."""

    def __init__(self, script: dict[str, Any], provider: str, store: Store) -> None:
        self.snapshots: dict[str, dict[str, Any]] = script.get("snapshots", {})
        self.store = store
        self.creates = 0
        self.crashed = False
        self.released: list[str] = []
        self.made: dict[str, tuple[str, str]] = {}  # operation key -> (sandbox id, tree hash)
        self.info = SandboxInfo(provider, "enforced", ("filesystem",), "confirmed", "final",
                                "final")

    def _create(self, snapshot_id: str, manifest_hash: str, key: str) -> tuple[str, str]:
        answer = self.snapshots.get(snapshot_id)
        if answer is None:
            raise SandboxError("snapshot_missing", f"no snapshot {snapshot_id}")
        self.creates += 1
        tree = tree_hash(answer["manifest"]) if "manifest" in answer else manifest_hash
        self.made[key] = (answer["restore_sandbox_id"], tree)
        response = answer.get("restore_response", "ok")
        if response == "lost":
            raise SandboxError("unavailable", "the restore's answer was lost")
        if response == "crash":
            assert isinstance(self.store, CrashableStore)
            self.crashed = self.store.armed = True
        return self.made[key]

    async def restore(self, snapshot: SnapshotData, key: str, ctx: Any) -> FakeSession:
        await ctx.fence()
        return FakeSession(*self._create(snapshot.snapshot_id, snapshot.manifest_hash, key))

    async def restore_plain(self, snapshot: dict[str, Any]) -> str:
        """The unledgered path: restore, verify the tree, return the new sandbox's id."""
        if snapshot["snapshot_id"] not in self.snapshots:
            raise NotFoundError(f"the fake sandbox has no snapshot {snapshot['snapshot_id']}")
        sandbox_id, tree = self._create(
            snapshot["snapshot_id"], snapshot["manifest_hash"], f"plain:{self.creates}")
        if tree != snapshot["manifest_hash"]:
            raise SandboxError("snapshot_manifest_mismatch",
                               "the restored tree does not match the snapshot's manifest_hash")
        return sandbox_id

    async def lookup(self, kind: str, key: str, ctx: Any) -> str | None:
        made = self.made.get(key)
        found = made is not None and all(
            a.get("create_lookup", "found") == "found" for a in self.snapshots.values())
        return made[0] if found and made is not None else None

    async def attach(self, ref: str, ctx: Any) -> FakeSession:
        await ctx.fence()
        return next(FakeSession(*m) for m in self.made.values() if m[0] == ref)

    async def create(self, key: str, ctx: Any) -> FakeSession:
        raise AssertionError("a fork restores; it never creates an empty sandbox")

    async def release(self, kind: str, ref: str, ctx: Any) -> str:
        await ctx.fence()
        if all(made[0] != ref for made in self.made.values()) or ref in self.released:
            return "already_gone"
        self.released.append(ref)
        return "released"


class FakeSession:
    def __init__(self, sandbox_id: str, manifest: str) -> None:
        self.id = sandbox_id
        self._manifest = manifest

    async def manifest_hash(self, ctx: Any) -> str:
        return self._manifest
