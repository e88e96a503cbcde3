"""A thread's ``mode_changed`` and ``settings_changed`` (what a host's settings and mode routes
append) hold for every later step: calls are decided under the new mode, and model requests
carry the new params (and the log that records them still verifies)."""

from __future__ import annotations

from typing import Any

from test_loop import ALICE, make_tools

from threads import Completed, Parked, Permissions, agent
from threads.run.control import control_writer
from threads.store.protocol import Store
from threads.store.transfer import export_branch
from threads.testing.scripted import call, say, scripted_model, use

USER = {"kind": "user", "principal": ALICE.to_wire()}


async def _change(store: Store, thread_id: str, type_: str, data: Any) -> None:
    branch = await store.root_branch(thread_id)
    async with control_writer(store, branch.branch_id) as writer:
        payload = data(writer.fold) if callable(data) else data
        await writer.append([(type_, payload, USER)])


async def test_a_mode_change_decides_the_next_calls(store: Store) -> None:
    applied: list[str] = []
    script = [say("hi"), use(call("write_file", path="a")), say("written"),
              use(call("write_file", path="b")), say("asked")]
    bot = agent(name="t", model=scripted_model(script), tools=make_tools(applied),
                permissions=Permissions(ask=("write_file",), allow_bypass=True))
    first = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(first, Completed)
    tid = first.thread.id
    await _change(store, tid, "mode_changed", {"from": "default", "to": "bypass"})
    bypassed = await bot.run("write a", store=store, principal=ALICE, thread=tid)
    assert isinstance(bypassed, Completed), bypassed
    assert [a.split(":")[:2] for a in applied] == [["write", "a"]]  # no approval asked
    await _change(store, tid, "mode_changed", {"from": "bypass", "to": "default"})
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

    def settings(fold: Any) -> dict[str, Any]:
        current = fold.settings
        return {"reason": "user", "settings": {
            "adapter": current["adapter"], "model": current["model"],
            "model_params": {"max_tokens": 7}, "reasoning_carryover": "keep"}}

    await _change(store, first.thread.id, "settings_changed", settings)
    second = await bot.run("two", store=store, principal=ALICE, thread=first.thread.id)
    assert isinstance(second, Completed), second
    assert model.requests[-1].params == {"max_tokens": 7}
    branch = await store.root_branch(first.thread.id)
    exported = await export_branch(store, branch.branch_id)  # the chain still verifies
    assert b'"settings_changed"' in exported
