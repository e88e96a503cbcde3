"""Sandbox crash drills in real processes: SIGKILL mid-command, SIGKILL between a create and its
ledger row, SIGSTOP of a holder whose command runs. Figures go to the drill summary line.

Each drill runs ``sandbox_worker.py`` in its own process on a real store and a real local
sandbox. Leases expire by moving the workers' clock offset, never by sleeping. The parent waits
only for the worker to reach a point it marks in the workspace (a file it writes).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from namespaces import live_members

from threads.clock import FakeClock
from threads.run.fork import FORK_LEASE_TTL_MS, abandon_interrupted_forks
from threads.sandbox.bubblewrap import BWRAP, local
from threads.sandbox.gc import collect
from threads.sandbox.ledger import DEFAULT_LIFETIME_MS
from threads.sandbox.supervisor import Records
from threads.store.capabilities import resources_of
from threads.store.sqlite import sqlite
from threads.store.transfer import export_branch

WORKER = Path(__file__).with_name("sandbox_worker.py")
LEASE_TTL_MS = 5_000
TRIALS = int(os.environ.get("THREADS_SANDBOX_DRILL_TRIALS", "6"))
FIGURES: dict[str, int] = {
    "kills": 0, "stops": 0, "interrupted_calls": 0, "leaked_sandboxes": 0, "reruns": 0,
}

pytestmark = [
    pytest.mark.drill,
    pytest.mark.skipif(not os.access(BWRAP, os.X_OK), reason=f"bubblewrap missing at {BWRAP}"),
]


class SandboxDrill:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "store"
        self.sandboxes = root / "sandboxes"
        self.clock_file = root / "clock_offset_ms"
        root.mkdir(parents=True, exist_ok=True)
        self.clock_file.write_text("0")

    def advance(self, ms: int) -> None:
        offset = int(self.clock_file.read_text()) + ms
        tmp = self.clock_file.with_suffix(".tmp")
        tmp.write_text(str(offset))
        tmp.replace(self.clock_file)

    def now(self) -> int:
        return time.time_ns() // 1_000_000 + int(self.clock_file.read_text())

    def spec(self, **fields: Any) -> str:
        base = {"store": str(self.store), "sandboxes": str(self.sandboxes),
                "clock_file": str(self.clock_file), "script": "bash"}
        return json.dumps({**base, **fields})

    def spawn(self, **fields: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(WORKER), self.spec(**fields)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run(self, **fields: Any) -> dict[str, Any]:
        done = subprocess.run([sys.executable, str(WORKER), self.spec(**fields)],
                              capture_output=True, timeout=90, check=False)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
        return result

    def workspaces(self) -> list[Path]:
        folder = self.sandboxes / "sandboxes"
        return sorted(p / "workspace" for p in folder.iterdir()) if folder.is_dir() else []

    def wait_for(self, name: str, proc: subprocess.Popen[bytes]) -> Path:
        """The workspace where the worker's command wrote ``name`` (bounded wait)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for workspace in self.workspaces():
                if (workspace / name).exists():
                    return workspace
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.02)
        raise AssertionError(f"the worker never wrote {name}")

    def thread_id(self) -> str:
        (thread,) = self.threads()
        return thread

    def threads(self) -> list[str]:
        if not (self.store / "threads.db").exists():
            return []

        async def find() -> list[str]:
            store = sqlite(self.store)
            try:
                return [root.thread_id for root in await store.list_threads()]
            finally:
                await store.close()

        return asyncio.run(find())

    def events(self, thread: str) -> list[dict[str, Any]]:
        async def read() -> list[dict[str, Any]]:
            store = sqlite(self.store)
            try:
                root = await store.root_branch(thread)
                data = await export_branch(store, root.branch_id)
            finally:
                await store.close()
            lines = [json.loads(line) for line in data.splitlines() if line]
            return [line for line in lines if "seq" in line and "type" in line]

        return asyncio.run(read())

    def ledger(self) -> list[Any]:
        async def rows() -> list[Any]:
            store = sqlite(self.store)
            try:
                return await resources_of(store).resources()
            finally:
                await store.close()

        return asyncio.run(rows())

    def branches(self, thread: str) -> list[Any]:
        async def read() -> list[Any]:
            store = sqlite(self.store)
            try:
                return await store.list_branches(thread)
            finally:
                await store.close()

        return asyncio.run(read())

    def own_events(self, branch_id: str) -> list[dict[str, Any]]:
        async def read() -> list[dict[str, Any]]:
            store = sqlite(self.store)
            try:
                return [json.loads(r.line) for r in await store.stored_rows(branch_id)]
            finally:
                await store.close()

        return asyncio.run(read())

    def abandon_and_gc(self, advance_ms: int) -> tuple[list[str], list[str]]:
        """``threads gc``'s two steps now (plus ``advance_ms``): interrupted forks given up,
        then what gc released."""
        async def run() -> tuple[list[str], list[str]]:
            store = sqlite(self.store, clock=FakeClock(self.now() + advance_ms))
            try:
                failed = await abandon_interrupted_forks(store)
                report = await collect(resources_of(store), {"local": local(self.sandboxes)},
                                       store.clock)
                return failed, report.released
            finally:
                await store.close()

        return asyncio.run(run())

    def gc_after_expiry(self) -> Any:
        async def run() -> Any:
            store = sqlite(self.store, clock=FakeClock(self.now() + DEFAULT_LIFETIME_MS + 1))
            try:
                return await collect(resources_of(store), {"local": local(self.sandboxes)},
                                     store.clock)
            finally:
                await store.close()

        return asyncio.run(run())


def command_namespace(workspace: Path) -> int:
    (record,) = Records(workspace.parent / "supervisor").all()
    assert record.pid_namespace is not None
    return record.pid_namespace


def resolutions(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["data"]["outcome"], e["data"]["by"]) for e in events
            if e["type"] == "effect_resolved"]


def test_sigkill_mid_command_is_interrupted_never_rerun(tmp_path: Path) -> None:
    drill = SandboxDrill(tmp_path)
    worker = drill.spawn(input="run the long command")
    workspace = drill.wait_for("started", worker)
    namespace = command_namespace(workspace)
    worker.send_signal(signal.SIGKILL)
    worker.communicate(timeout=60)
    FIGURES["kills"] += 1
    drill.advance(LEASE_TTL_MS + 1)

    again = drill.run(thread=drill.thread_id(), input=None)
    assert again["status"] == "completed", again
    assert live_members(namespace) == []
    events = drill.events(again["thread"])
    assert resolutions(events) == [("interrupted", "sandbox_terminated")]
    FIGURES["interrupted_calls"] += 1
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["data"]["origin"] == "interrupted"
    assert result["data"]["is_error"] is True
    runs = (workspace / "runs").read_text().splitlines()
    FIGURES["reruns"] += len(runs) - 1
    assert runs == ["start"]  # started once, never again, never finished
    assert drill.run(thread=again["thread"], input=None)["status"] == "completed"
    assert (workspace / "runs").read_text().splitlines() == ["start"]


def test_sigkill_mid_command_of_a_child_sharing_the_sandbox(tmp_path: Path) -> None:
    """A subagent with ``isolation: shared_sandbox`` is SIGKILLed mid-command in its parent's
    sandbox. Running the parent again resumes the same child, which re-attaches to the same
    sandbox (no second one is made), proves the command's processes gone and records the call
    interrupted; the child's earlier command and the parent's are not repeated, and the parent
    reads everything both wrote."""
    drill = SandboxDrill(tmp_path)
    worker = drill.spawn(input="go", script="lent")
    workspace = drill.wait_for("started", worker)
    worker.send_signal(signal.SIGKILL)
    worker.communicate(timeout=60)
    FIGURES["kills"] += 1
    drill.advance(LEASE_TTL_MS + 1)
    [child] = [t for t in drill.threads() if "parent" in drill.events(t)[0]["data"]]
    [parent] = [t for t in drill.threads() if t != child]
    assert [e["type"] for e in drill.events(child)][-1] == "effect_begin"

    again = drill.run(thread=parent, input=None, script="lent")
    assert again["status"] == "completed", again
    assert drill.workspaces() == [workspace]  # the same sandbox, re-attached
    runs = (workspace / "runs").read_text().splitlines()
    FIGURES["reruns"] += len(runs) - 3
    assert runs == ["parent", "child", "child2"]
    assert resolutions(drill.events(child)) == [("interrupted", "sandbox_terminated")]
    FIGURES["interrupted_calls"] += 1
    assert all(m == [] for m in [live_members(n) for n in _namespaces(workspace)])
    parent_events = drill.events(parent)
    [spawned] = [e for e in parent_events if e["type"] == "agent_spawned"]
    assert spawned["data"]["isolation"] == "shared_sandbox"
    assert spawned["data"]["child_thread_id"] == child
    shown = [e["data"]["preview"] for e in parent_events if e["type"] == "tool_result"]
    assert shown[-1] == "parent\nchild\nchild2\n"
    parent_branch = drill.branches(parent)[0].branch_id
    assert [(r.kind, r.state, r.owner_branch_id) for r in drill.ledger()] == [
        ("sandbox", "live", parent_branch)
    ]
    assert drill.run(thread=parent, input=None, script="lent")["status"] == "completed"
    assert (workspace / "runs").read_text().splitlines() == runs
    assert len(drill.events(parent)) == len(parent_events)


def _namespaces(workspace: Path) -> list[int]:
    return [r.pid_namespace for r in Records(workspace.parent / "supervisor").all()
            if r.pid_namespace is not None]


def test_sigkill_between_create_and_record_leaks_nothing(tmp_path: Path) -> None:
    drill = SandboxDrill(tmp_path)
    worker = drill.spawn(input="go", kill_after_create=True)
    worker.communicate(timeout=60)
    assert worker.returncode == -signal.SIGKILL
    FIGURES["kills"] += 1
    assert len(drill.workspaces()) == 1
    assert [r.state for r in drill.ledger()] == ["pending"]  # written before the create
    drill.advance(LEASE_TTL_MS + 1)

    # The crash hit inside the bash call (its sandbox is made on first use, after
    # effect_begin). The rerun finds the sandbox by its key, adopts it (nothing is created
    # twice), proves the call's command never ran, and records it interrupted.
    (made,) = drill.workspaces()
    again = drill.run(thread=drill.thread_id(), input=None)
    assert again["status"] == "completed", again
    assert drill.workspaces() == [made]
    assert [(r.kind, r.state, r.ref) for r in drill.ledger()] == [
        ("sandbox", "live", made.parent.name)
    ]
    assert resolutions(drill.events(again["thread"])) == [("interrupted", "sandbox_terminated")]
    assert not (made / "runs").exists()

    report = drill.gc_after_expiry()
    assert len(report.released) == 1
    leaked = len(drill.workspaces())
    FIGURES["leaked_sandboxes"] += leaked
    assert leaked == 0
    assert [r.state for r in drill.ledger()] == ["released"]


def test_sigkill_while_the_sandbox_is_half_made_leaves_nothing(tmp_path: Path) -> None:
    """Killed before the sandbox directory was renamed into place: no sandbox exists (its
    half-made directory is not one), the row is pending. The next run finds nothing under the
    key (a final answer: nothing ran), settles the row, sweeps the half-made directory, and
    records the call interrupted; its next sandbox carries its owner."""
    drill = SandboxDrill(tmp_path)
    worker = drill.spawn(input="go", kill_mid_create=True)
    worker.communicate(timeout=60)
    assert worker.returncode == -signal.SIGKILL
    FIGURES["kills"] += 1
    folder = drill.sandboxes / "sandboxes"
    (torn,) = [p.name for p in folder.iterdir()]
    assert torn.startswith(".new-")
    assert local(drill.sandboxes).sandbox_ids() == []
    assert [r.state for r in drill.ledger()] == ["pending"]
    drill.advance(LEASE_TTL_MS + 1)

    again = drill.run(thread=drill.thread_id(), input=None)
    assert again["status"] == "completed", again
    assert resolutions(drill.events(again["thread"])) == [("interrupted", "sandbox_terminated")]
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
    assert [(r.state, r.ref) for r in drill.ledger()] == [("released", None)]


def test_a_frozen_holder_is_fenced_out_of_its_sandbox(tmp_path: Path) -> None:
    drill = SandboxDrill(tmp_path)
    holder = drill.spawn(input="two steps", script="two_step")
    workspace = drill.wait_for("started", holder)
    namespace = command_namespace(workspace)
    holder.send_signal(signal.SIGSTOP)
    FIGURES["stops"] += 1
    try:
        drill.advance(LEASE_TTL_MS + 1)  # the frozen holder's lease runs out; no sleeping
        taken = drill.run(thread=drill.thread_id(), input=None, script="two_step")
        assert taken["status"] == "completed", taken
        assert live_members(namespace) == []  # the takeover proved the command gone
    finally:
        holder.send_signal(signal.SIGCONT)
    out, err = holder.communicate(timeout=60)
    assert not (workspace / "second").exists(), "the stale holder's next sandbox call ran"
    stale = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
    assert stale.get("error") in ("stale_epoch", "branch_busy", "writer_poisoned"), (stale, err)
    events = drill.events(taken["thread"])
    assert resolutions(events) == [("interrupted", "sandbox_terminated")]
    assert (workspace / "runs").read_text().splitlines() == ["start"]


def test_kills_at_random_times_never_rerun_a_command_or_leak(tmp_path: Path) -> None:
    seed = int(os.environ.get("THREADS_DRILL_SEED") or random.SystemRandom().randrange(2**32))
    print(f"sandbox random drill seed={seed}")
    rng = random.Random(seed)
    for trial in range(TRIALS):
        drill = SandboxDrill(tmp_path / f"t{trial}")
        worker = drill.spawn(input="three commands", script="three")
        drill.wait_for("runs", worker)  # the first command started
        time.sleep(rng.uniform(0.0, 1.6))  # then a random moment of the run, not a lease wait
        worker.send_signal(signal.SIGKILL)
        worker.communicate(timeout=60)
        FIGURES["kills"] += 1
        threads = drill.threads()
        if not threads:
            continue  # killed before the thread existed: nothing to recover
        drill.advance(LEASE_TTL_MS + 1)
        done = drill.run(thread=threads[0], input=None, script="three")
        assert done["status"] == "completed", (seed, trial, done)
        events = drill.events(done["thread"])
        # One working sandbox, never a second; a snapshot's proof scratch that the kill
        # interrupted (a restore of it) is left to gc, checked below.
        working = working_sandboxes(drill.ledger())
        assert len(working) == 1, (seed, trial, working)
        runs = drill.sandboxes / "sandboxes" / str(working[0].ref) / "workspace" / "runs"
        words = runs.read_text().splitlines() if runs.exists() else []
        reruns = len(words) - len(set(words))
        FIGURES["reruns"] += reruns
        assert reruns == 0, (seed, trial, words)
        origins = [e["data"]["origin"] for e in events if e["type"] == "tool_result"]
        assert len(origins) == 3, (seed, trial, origins)
        executed = origins.count("executed")
        FIGURES["interrupted_calls"] += origins.count("interrupted")
        assert executed <= len(set(words)) <= 3, (seed, trial, origins, words)
        for workspace in drill.workspaces():
            for record in Records(workspace.parent / "supervisor").all():
                if record.pid_namespace is not None:
                    assert live_members(record.pid_namespace) == [], (seed, trial)
        drill.gc_after_expiry()
        leaked = len(drill.workspaces())
        FIGURES["leaked_sandboxes"] += leaked
        assert leaked == 0, (seed, trial)
        # What stays of snapshots is the fork points the log records (a fork point outlives
        # its sandbox's idleness): their refs and archives, nor a file a kill left mid-write.
        recorded = {e["data"]["snapshot_id"] for e in events if e["type"] == "snapshot"}
        live = {r.ref for r in drill.ledger() if r.kind == "snapshot" and r.state == "live"}
        assert live == recorded, (seed, trial, live, recorded)
        assert snapshot_files(drill.sandboxes) == snapshot_files_of(drill.sandboxes, recorded)


def snapshot_files(sandboxes: Path) -> set[str]:
    folder = sandboxes / "snapshots"
    return {str(p.relative_to(folder)) for kept in ("refs", "archives")
            for p in (folder / kept).glob("*") if (folder / kept).is_dir()}


def snapshot_files_of(sandboxes: Path, snapshot_ids: set[str]) -> set[str]:
    """The ref of each snapshot and the archive it names."""
    refs = [sandboxes / "snapshots" / "refs" / f"{i}.json" for i in snapshot_ids]
    return {f"refs/{ref.name}" for ref in refs} | {
        f"archives/{json.loads(ref.read_text())['archive']}.tar" for ref in refs
    }


def working_sandboxes(rows: list[Any]) -> list[Any]:
    """The ledger's sandbox rows but the scratch ones snapshots are proven in: each snapshot
    is restored once into a scratch sandbox, ledgered right after the snapshot's own row."""
    snapshots = sorted(r.acquired_at for r in rows if r.kind == "snapshot")
    working = []
    for row in sorted((r for r in rows if r.kind == "sandbox"), key=lambda r: r.acquired_at):
        if working and snapshots and snapshots[0] <= row.acquired_at:
            snapshots.pop(0)  # that snapshot's proof
            continue
        working.append(row)
    return working


@pytest.mark.parametrize("when", ["before_commit", "after_commit"])
def test_sigkill_at_the_fork_commit_leaves_a_whole_fork_or_none(
    tmp_path: Path, when: str
) -> None:
    """The child's fork event and its becoming ready are one transaction. Killed right before
    it: the child stays ``forking`` (never readable as a branch), gc gives it up once its lease
    lapsed and releases the sandbox it was restored into. Killed right after: the child is
    ready with its fork event, and its sandbox is its own."""
    drill = SandboxDrill(tmp_path)
    parent = drill.run(input="three commands", script="three")
    assert parent["status"] == "completed", parent
    tid = parent["thread"]
    before = set(drill.workspaces())
    worker = drill.spawn(fork=True, thread=tid, kill_fork=when)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == -signal.SIGKILL, err.decode()[-2000:]
    FIGURES["kills"] += 1
    (child,) = [b for b in drill.branches(tid) if b.parent_branch_id is not None]
    (restored,) = set(drill.workspaces()) - before
    owned = [r for r in drill.ledger() if r.owner_branch_id == child.branch_id]
    assert [(r.kind, r.state, r.ref) for r in owned] == [
        ("sandbox", "live", restored.parent.name)]
    if when == "after_commit":
        assert child.state == "ready"
        (fork,) = drill.own_events(child.branch_id)
        assert fork["type"] == "fork"
        assert fork["data"]["sandbox_id"] == restored.parent.name
        return
    assert child.state == "forking"
    assert child.head_seq == child.fork_at_seq  # no event of its own: no half fork
    assert drill.abandon_and_gc(advance_ms=0) == ([], [])  # its lease is still live
    drill.advance(FORK_LEASE_TTL_MS + 1)
    failed, released = drill.abandon_and_gc(advance_ms=0)
    assert failed == [child.branch_id]
    assert released == [owned[0].operation_key]
    (child,) = [b for b in drill.branches(tid) if b.parent_branch_id is not None]
    assert child.state == "fork_failed"
    leaked = len(set(drill.workspaces()) - before)
    FIGURES["leaked_sandboxes"] += leaked
    assert leaked == 0
