"""``threads gc`` as a user runs it: a real process over a store and a sandbox directory."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from threads.clock import FakeClock
from threads.log.ids import uuid7
from threads.log.lines import make_header
from threads.sandbox import SandboxContext
from threads.sandbox.bubblewrap import LocalSandbox
from threads.sandbox.ledger import DEFAULT_LIFETIME_MS, Owner
from threads.store.capabilities import resources_of
from threads.store.sqlite import sqlite


def _gc(store: Path, sandboxes: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "threads.cli", "gc", "--store", str(store),
         "--sandboxes", str(sandboxes)],
        capture_output=True, text=True, timeout=60, check=False,
    )


async def test_gc_releases_expired_sandboxes_and_reports(
    tmp_path: Path, provider: LocalSandbox
) -> None:
    # Written two lifetimes ago, so the system clock gc reads finds the sandbox expired.
    then = time.time_ns() // 1_000_000 - 2 * DEFAULT_LIFETIME_MS
    store = sqlite(tmp_path / "store", clock=FakeClock(then))
    header = make_header(uuid7(then), uuid7(then), then)
    await store.create_branch(header, tenant_id="acme")
    lease = await store.acquire_lease(header.branch_id, "w1", 30_000)

    async def fence() -> None:
        await store.check_lease(lease)

    owner = Owner(resources_of(store), provider, store.clock, "acme", lambda: lease,
                  SandboxContext(fence))
    await owner.sandbox_session()
    await resources_of(store).resource_pending(
        operation_key=uuid7(then), tenant_id="acme", provider="local", kind="sandbox",
        lease=lease)
    await store.close()
    assert len(provider.sandbox_ids()) == 1

    done = _gc(tmp_path / "store", provider.root)
    assert done.returncode == 0, done.stderr
    assert "released 1" in done.stdout
    assert "1 pending" in done.stdout
    assert provider.sandbox_ids() == []
    again = _gc(tmp_path / "store", provider.root)
    assert "released 0" in again.stdout
