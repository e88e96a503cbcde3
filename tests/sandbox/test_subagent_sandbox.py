"""Subagents and their parent's sandbox (``spawn_agent``'s ``isolation``): ``shared_sandbox``
runs the child's tools in the parent's live sandbox (what either writes the other reads), and so
does ``none`` when both agents have a sandbox of the same provider; the sandbox stays the
parent's (one ledger row, the parent branch's), and the child's thread run on its own is
refused ``subagent_shares_sandbox``. A spawn that can't share is closed
``not_executed`` and spawns nothing: no sandbox on the parent or on the child, an isolation not
supported, a value of the wrong type. Real bubblewrap sandboxes, both engines."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from threads import Completed, Failed, Principal, agent, open_thread
from threads.clock import SystemClock
from threads.errors import StoreError
from threads.log.lines import Event
from threads.run.agent import Agent
from threads.sandbox.binding import RunSandbox
from threads.sandbox.bubblewrap import LocalSandbox
from threads.sandbox.protocol import SandboxContext, SandboxSession
from threads.store.capabilities import resources_of
from threads.store.protocol import Store
from threads.testing import Reply
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal(issuer="api", tenant="acme", subject="alice")


@pytest.fixture
def clock() -> SystemClock:
    """These runs keep the machine's time (the shared ``store`` fixture reads this fixture)."""
    return SystemClock()


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


def previews(events: list[Event]) -> list[str]:
    return [str(e.data["preview"]) for e in of_type(events, "tool_result")]


def clerk(sandbox: Any, *replies: Reply) -> Agent:
    return agent(name="clerk", model=scripted_model(list(replies)), sandbox=sandbox)


def boss(child: Agent, sandbox: Any, *replies: Reply) -> Agent:
    return agent(name="boss", model=scripted_model(list(replies)), sandbox=sandbox,
                 subagents=[child])


@pytest.mark.parametrize("isolation", ["shared_sandbox", "none"])
async def test_the_child_works_in_its_parents_sandbox(
    store: Store, provider: LocalSandbox, isolation: str
) -> None:
    child = clerk(
        provider,
        use(call("read_file", path="/workspace/from_parent.txt")),
        use(call("write_file", path="/workspace/from_child.txt", content="child was here")),
        say("read it, wrote mine"),
    )
    parent = boss(
        child, provider,
        use(call("write_file", path="/workspace/from_parent.txt", content="parent was here")),
        use(call("spawn_agent", agent="clerk", prompt="read and write", isolation=isolation)),
        use(call("read_file", path="/workspace/from_child.txt")),
        say("done"),
    )
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    events = await result.thread.timeline()
    [spawned] = of_type(events, "agent_spawned")
    assert spawned.data["isolation"] == isolation
    assert previews(events)[-1] == "child was here"  # the parent reads what the child wrote
    kid = await open_thread(store, spawned.data["child_thread_id"], principal=ALICE)
    kid_events = await kid.timeline()
    assert previews(kid_events)[0] == "parent was here"  # and the child what the parent wrote
    # one sandbox, the parent's: the child's branch owns no ledger row
    resources = resources_of(store)
    parent_branch = (await result.thread.branches())[0].branch_id
    child_branch = (await kid.branches())[0].branch_id
    rows = await resources.resources(owner_branch_id=parent_branch)
    assert [(r.kind, r.state) for r in rows] == [("sandbox", "live")]
    assert await resources.resources(owner_branch_id=child_branch) == []

    # run on its own, the child would need a sandbox only its parent's run holds: refused
    alone = await child.run(None, thread=kid.id, store=store, principal=ALICE)
    assert isinstance(alone, Failed)
    assert alone.error.code == "subagent_shares_sandbox"
    assert result.thread.id in alone.error.message
    assert len(await kid.timeline()) == len(kid_events)
    assert await resources.resources(owner_branch_id=child_branch) == []


async def test_a_child_of_another_provider_keeps_its_own_sandbox_under_none(
    store: Store, provider: LocalSandbox
) -> None:
    """``none`` shares only a sandbox of the same provider; ``shared_sandbox`` asks for the
    parent's whatever the child's provider."""
    other = LocalSandbox(provider.root.parent / "other", provider.limits)
    other._info = dataclasses.replace(provider.info, provider="elsewhere")
    child = clerk(other, use(call("list_files", path="/workspace")), say("looked"))
    parent = boss(
        child, provider,
        use(call("write_file", path="/workspace/mine.txt", content="x")),
        use(call("spawn_agent", agent="clerk", prompt="look")),
        say("done"),
    )
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    [spawned] = of_type(await result.thread.timeline(), "agent_spawned")
    kid = await open_thread(store, spawned.data["child_thread_id"], principal=ALICE)
    listing = previews(await kid.timeline())[0]
    assert "mine.txt" not in listing  # its own, empty workspace
    alone = await child.run(None, thread=kid.id, store=store, principal=ALICE)
    assert isinstance(alone, Completed)  # its sandbox is its own: it may run on its own


@pytest.mark.parametrize(
    ("parent_has", "child_has", "arguments", "words"),
    [
        (False, True, {"isolation": "shared_sandbox"},
         "not executed: isolation shared_sandbox needs a sandbox: this agent has none to"
         " share"),
        (True, False, {"isolation": "shared_sandbox"},
         "not executed: isolation shared_sandbox needs a sandbox: clerk has none"),
        (True, True, {"isolation": "worktree"},
         "not executed: isolation worktree is not supported yet"),
        (True, True, {"isolation": "forked_sandbox"},
         "not executed: isolation forked_sandbox is not supported yet"),
        (True, True, {"isolation": "elsewhere"}, "invalid input for spawn_agent: isolation"),
        (True, True, {"isolation": 5}, "invalid input for spawn_agent: isolation"),
        (True, True, {"isolation": None}, "invalid input for spawn_agent: isolation"),
        (True, True, {"background": "later"}, "invalid input for spawn_agent: background"),
    ],
)
async def test_a_spawn_that_cannot_share_is_closed_and_spawns_nothing(
    store: Store, provider: LocalSandbox, parent_has: bool, child_has: bool,
    arguments: dict[str, Any], words: str,
) -> None:
    child = clerk(provider if child_has else None, say("unused"))
    parent = agent(
        name="boss",
        model=scripted_model([use(call("spawn_agent", agent="clerk", prompt="x", **arguments)),
                              say("ok")]),
        sandbox=provider if parent_has else None, subagents=[child],
    )
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    events = await result.thread.timeline()
    assert of_type(events, "agent_spawned") == []
    [closed] = of_type(events, "tool_result")
    assert closed.data["origin"] == "not_executed"
    assert closed.data["is_error"]
    assert str(closed.data["preview"]).startswith(words), closed.data["preview"]
    assert await result.thread.children() == ()
    # nothing ran in a sandbox: no sandbox was created for the refused spawn
    parent_branch = (await result.thread.branches())[0].branch_id
    assert await resources_of(store).resources(owner_branch_id=parent_branch) == []


class Recording:
    """A session that passes each call's fence, then answers."""

    async def read_file(self, path: str, ctx: SandboxContext) -> bytes:
        await ctx.fence()
        return b"shared"


async def test_a_lent_sandbox_is_the_lenders_behind_both_fences(
    store: Store, provider: LocalSandbox
) -> None:
    """The borrower reads through the lender's session; each call passes the child's fence and
    the parent's; it settles no ledger rows and takes no snapshot."""
    passed: list[str] = []
    refuse: set[str] = set()

    def fence(name: str) -> Callable[[], Awaitable[None]]:
        async def check() -> None:
            if name in refuse:
                raise StoreError("stale_epoch", f"{name} lost its lease")
            passed.append(name)
        return check

    def no_lease() -> Any:
        raise AssertionError("a borrower never touches the ledger")

    lender = RunSandbox(provider, store, "acme", no_lease, fence("parent"))
    lender._session = cast(SandboxSession, Recording())
    borrowed = lender.lent(fence("child"))
    assert await borrowed.handle("key").read_file("/workspace/x") == b"shared"
    assert passed == ["child", "parent"]
    await borrowed.settle_pending(set())  # nothing: the rows are the lender's
    assert await borrowed.snapshot_if_changed(None) is None
    for lost in ("child", "parent"):
        refuse.add(lost)
        with pytest.raises(StoreError):
            await borrowed.read_file("/workspace/x")
        refuse.clear()
