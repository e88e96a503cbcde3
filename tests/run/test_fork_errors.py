"""A fork whose restore fails names the fork point: the vendored ``fork-restore-lost-found`` log,
forked through a provider whose lost restore can't be found again by a final lookup (its lookup
is ``nonfinal``), fails ``resource_unknown`` at the snapshot's seq, leaves no ready child and
keeps the ledger row ``unknown`` for an operator. Both stores."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from shared_data import CASES, needs
from threads import FakeClock, open_thread
from threads.errors import ThreadsError
from threads.sandbox.protocol import SandboxInfo
from threads.store.capabilities import resources_of
from threads.store.protocol import Store
from threads.store.transfer import import_log

sys.path.insert(0, str(Path(__file__).parent.parent / "conformance"))
from fork import FakeProvider

CASE = CASES / "fork-restore-lost-found"


@pytest.fixture
def clock() -> FakeClock:
    """The case's clock: its snapshot has not expired yet (the shared ``store`` uses it)."""
    return FakeClock(json.loads((CASE / "case.json").read_text())["clock"]["now"])


class Unfindable(FakeProvider):
    """The restore happens and its answer is lost; a lookup never finds it and is not final."""

    def __init__(self, script: dict[str, Any], provider: str, store: Store) -> None:
        super().__init__(script, provider, store)
        self.info = SandboxInfo(provider, "enforced", ("filesystem",), "confirmed", "nonfinal",
                                "final")

    async def lookup(self, kind: str, key: str, ctx: Any) -> str | None:
        return None


@needs(CASE, "the vendored fork-restore-lost-found case")
async def test_a_lost_restore_is_resource_unknown_at_the_fork_point(store: Store) -> None:
    data = (CASE / "log.jsonl").read_bytes()
    lines = [json.loads(line) for line in data.splitlines()]
    snapshot = next(line for line in lines if line.get("type") == "snapshot")
    tenant = next(line["actor"]["principal"]["tenant"] for line in lines
                  if "principal" in line.get("actor", {}))
    imported = await import_log(store, data, tenant_id=tenant)
    script = json.loads((CASE / "sandbox.json").read_text())
    provider = Unfindable(script, snapshot["data"]["provider"], store)
    thread = await open_thread(store, imported.thread_id)
    with pytest.raises(ThreadsError) as refused:
        await thread.fork(snapshot["event_id"], provider)  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.seq) == ("resource_unknown", snapshot["seq"])
    branches = await store.list_branches(imported.thread_id)
    assert [b.state for b in branches if b.branch_id != imported.branch_id] == ["fork_failed"]
    assert [r.state for r in await resources_of(store).resources()] == ["unknown"]
