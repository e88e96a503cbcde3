"""The ``fork`` kind: import a log, fork it at the case's event, and check the child.

Per case: a fresh SQLite store on the case's clock, ``import_log``, then ``Thread.fork`` at
``input.fork_at_event_id`` with ``input.new_branch_id``, restoring through a fake sandbox that
answers from ``sandbox.json`` (its ``restore_sandbox_id`` per snapshot id). Compared: the
outcome / ``error{code, seq}``, the appended events on the child (exact count and order, ``data``
deep-subset), ``fork.child_created`` / ``at_seq`` / ``parent_unchanged`` (the parent's export is
byte-identical before and after) / ``knowledge_revision`` (the child's fold), and the state of
the parent as a reader. A case that pins ``resources`` forks through the resource ledger with
``FakeProvider`` (a sandbox provider that plays ``sandbox.json``) and compares its create count
and the ledger rows the fork left.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from recover import _compare_appended, _lines, _principal, _script
from runner import Case, CaseSkipped, Expected, _compare_error, _compare_state, load_expected

from threads.clock import FakeClock
from threads.errors import NotFoundError, ThreadsError
from threads.log.lines import Event
from threads.run.thread import Thread
from threads.sandbox.protocol import SandboxError, SandboxInfo, SnapshotData
from threads.store.capabilities import resources_of
from threads.store.sqlite import sqlite
from threads.store.transfer import export_branch, import_log

_FORK_KEYS = frozenset({"outcome", "error", "state", "appended", "fork", "resources"})
_FORK_FIELDS = frozenset(
    {"child_created", "at_seq", "parent_unchanged", "child_state", "knowledge_revision"}
)


def run_fork(case: Case) -> Expected:
    expected = load_expected(case)
    unknown = expected.doc.keys() - _FORK_KEYS
    assert not unknown, f"expected file has keys this runner does not know: {sorted(unknown)}"
    extra = expected.doc.get("fork", {}).keys() - _FORK_FIELDS
    assert not extra, f"expected fork block has unknown keys: {sorted(extra)}"
    sandbox = _script(case, "sandbox_script", "sandbox.json")
    if sandbox is None and expected.doc["outcome"] == "ok":
        raise CaseSkipped(
            f"data missing: case.json names {case.spec.get('sandbox_script')}, which is not in"
            " the vendored case, and the child's sandbox_id can only come from its restore"
        )
    with tempfile.TemporaryDirectory(prefix="threads-fork-") as tmp:
        asyncio.run(_run(case, expected, sandbox or {}, Path(tmp)))
    return expected


async def _run(case: Case, expected: Expected, sandbox: dict[str, Any], tmp: Path) -> None:
    now = case.spec["clock"]["now"]
    data = case.log_path().read_bytes()
    store = sqlite(tmp / "store", clock=FakeClock(now))
    restores: list[str] = []

    async def restore(snapshot: dict[str, Any]) -> str:
        restores.append(snapshot["snapshot_id"])
        answer = sandbox.get("snapshots", {}).get(snapshot["snapshot_id"])
        if answer is None:
            raise NotFoundError(f"the fake sandbox has no snapshot {snapshot['snapshot_id']}")
        return str(answer["restore_sandbox_id"])

    ledgered = "resources" in expected.doc
    provider = FakeProvider(sandbox, _snapshot_provider(data)) if ledgered else None
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
                provider or restore,
                new_branch_id=spec.get("new_branch_id"),
                knowledge_policy=spec.get("knowledge_policy", "pinned"),
            )
        except ThreadsError as err:
            _compare_error(expected, err)
        else:
            assert expected.doc["outcome"] == "ok", f"fork succeeded, expected {expected.doc}"
        branches = await store.list_branches(imported.thread_id)
        fork = expected.doc.get("fork", {})
        if "child_created" in fork:
            assert (len(branches) > 1) == fork["child_created"], "child creation differs"
        if expected.doc["outcome"] == "error":
            assert restores == [], "a failed fork restored a sandbox"
        if fork.get("parent_unchanged"):
            assert await export_branch(store, parent.branch_id) == before, "parent changed"
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
        _compare_appended(expected.doc.get("appended", []), appended)
        if provider is not None:
            rows = await resources_of(store).resources()
            got = {"creates": provider.creates,
                   "rows": [{"kind": r.kind, "state": r.state} for r in rows]}
            assert got == expected.doc["resources"], f"resources {got}"
    finally:
        await store.close()


def _snapshot_provider(data: bytes) -> str:
    return next(str(e["data"]["provider"]) for e in _lines(data) if e["type"] == "snapshot")


class FakeProvider:
    """``sandbox.json`` as a sandbox provider for ledgered forks: each snapshot's restore
    creates ``restore_sandbox_id``, its answer possibly ``lost`` (the create happened, the
    reply did not arrive), and ``create_lookup`` says whether the key finds it again."""

    def __init__(self, script: dict[str, Any], provider: str) -> None:
        self.snapshots: dict[str, dict[str, Any]] = script.get("snapshots", {})
        self.creates = 0
        self.made: dict[str, tuple[str, str]] = {}  # operation key -> (sandbox id, manifest)
        self.info = SandboxInfo(provider, "enforced", ("filesystem",), "confirmed", "final",
                                "final")

    async def restore(self, snapshot: SnapshotData, key: str, ctx: Any) -> FakeSession:
        await ctx.fence()
        answer = self.snapshots.get(snapshot.snapshot_id)
        if answer is None:
            raise SandboxError("snapshot_missing", f"no snapshot {snapshot.snapshot_id}")
        self.creates += 1
        self.made[key] = (answer["restore_sandbox_id"], snapshot.manifest_hash)
        if answer.get("restore_response") == "lost":
            raise SandboxError("unavailable", "the restore's answer was lost")
        return FakeSession(*self.made[key])

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
        raise AssertionError("nothing in a fork case is released")


class FakeSession:
    def __init__(self, sandbox_id: str, manifest: str) -> None:
        self.id = sandbox_id
        self._manifest = manifest

    async def manifest_hash(self, ctx: Any) -> str:
        return self._manifest
