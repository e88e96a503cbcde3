"""A thread's mode and settings changes, made through the handle (``Thread.change_mode``,
``Thread.change_settings``: what a host's settings and mode routes call) hold for every later
step: calls are decided under the new mode, and model requests carry the new params (and the
log that records them still verifies). A change is refused, with nothing recorded, for a
principal who may not decide on the thread, a model the pinned policy doesn't list, ``bypass``
without ``allow_bypass``, a value the log can't hold, or a branch of another thread."""

from __future__ import annotations

import pytest
from test_loop import ALICE, make_tools

from threads import Completed, ControlError, Parked, Permissions, Principal, agent, open_thread
from threads.errors import NotFoundError
from threads.store.protocol import Store
from threads.store.transfer import export_branch
from threads.testing.scripted import call, say, scripted_model, use

BOB = Principal("api", "acme", "bob")  # the same tenant, not the thread's starter


async def test_a_mode_change_decides_the_next_calls(store: Store) -> None:
    applied: list[str] = []
    script = [say("hi"), use(call("write_file", path="a")), say("written"),
              use(call("write_file", path="b")), say("asked")]
    bot = agent(name="t", model=scripted_model(script), tools=make_tools(applied),
                permissions=Permissions(ask=("write_file",), allow_bypass=True))
    first = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(first, Completed)
    tid = first.thread.id
    moved = await first.thread.change_mode(ALICE, "bypass")
    assert (moved.type, moved.data) == ("mode_changed", {"from": "default", "to": "bypass"})
    assert moved.actor == {"kind": "user", "principal": ALICE.to_wire()}
    bypassed = await bot.run("write a", store=store, principal=ALICE, thread=tid)
    assert isinstance(bypassed, Completed), bypassed
    assert [a.split(":")[:2] for a in applied] == [["write", "a"]]  # no approval asked
    await first.thread.change_mode(ALICE, "default")
    asked = await bot.run("write b", store=store, principal=ALICE, thread=tid)
    assert isinstance(asked, Parked)
    assert asked.reason == "awaiting_approval"
    assert len(applied) == 1


async def test_a_settings_change_sets_the_params_of_the_next_requests(
    store: Store,
) -> None:
    model = scripted_model([say("one"), say("two")])
    bot = agent(name="t", model=model)
    first = await bot.run("one", store=store, principal=ALICE)
    assert isinstance(first, Completed)
    assert model.requests[-1].params == {"max_tokens": 1024}
    changed = await first.thread.change_settings(
        ALICE, provider="scripted", model="scripted-1", model_params={"max_tokens": 7})
    assert changed.data["reason"] == "user"
    assert changed.data["settings"]["reasoning_carryover"] == "keep"
    second = await bot.run("two", store=store, principal=ALICE, thread=first.thread.id)
    assert isinstance(second, Completed), second
    assert model.requests[-1].params == {"max_tokens": 7}
    branch = await store.root_branch(first.thread.id)
    exported = await export_branch(store, branch.branch_id)  # the chain still verifies
    assert b'"settings_changed"' in exported


async def test_refused_changes_record_nothing(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("hi")]))
    first = await bot.run("hi", store=store, principal=ALICE)
    thread = first.thread
    head = (await store.root_branch(thread.id)).head_seq
    as_bob = await open_thread(store, thread.id, principal=BOB)
    refusals = [
        ("forbidden", as_bob.change_mode(BOB, "plan")),
        ("invalid_transition", thread.change_mode(ALICE, "bypass")),  # no allow_bypass
        ("invalid_transition", thread.change_settings(ALICE, provider="other", model="x")),
        *[("invalid_argument", thread.change_settings(
            ALICE, provider="scripted", model="scripted-1", model_params={"n": value}))
          for value in (2**60, float("nan"))],
    ]
    for code, change in refusals:
        with pytest.raises(ControlError) as refused:
            await change
        assert refused.value.code == code, refused.value
    other = await bot.run("hi", store=store, principal=ALICE)
    other_branch = (await store.root_branch(other.thread.id)).branch_id
    with pytest.raises(NotFoundError):
        await thread.change_mode(ALICE, "plan", branch_id=other_branch)
    assert (await store.root_branch(thread.id)).head_seq == head
