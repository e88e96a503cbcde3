"""Structured output and questions in the real loop: ``agent(output=Model)`` ends a turn only on
a valid ``final_output`` (plain text is asked again, a candidate the schema refuses is shown its
errors, ``Completed.output`` is the validated model, ``output_invalid`` after
``output_retries``); ``ask_user`` parks ``awaiting_input`` on the call and ``Thread.answer``
(held to the options and to the principal who opened the turn) lets the next run go on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import BaseModel

from threads import (
    Agent,
    Cancelled,
    Completed,
    ControlError,
    Failed,
    Parked,
    Pending,
    Principal,
    agent,
    ask_user,
    open_thread,
    sqlite,
)
from threads.cli.main import main
from threads.log.lines import Event
from threads.store.protocol import Store
from threads.testing import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")
BOB = Principal("api", "acme", "bob")


class Verdict(BaseModel):
    fixed: bool


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


async def test_a_turn_ends_only_on_a_valid_final_output(store: Store) -> None:
    model = scripted_model([
        say("Yes, it is fixed."),
        use(call("final_output", "c1", fixed="yes")),
        use(call("final_output", "c2", fixed=True)),
    ])
    bot = agent(name="t", model=model, output=Verdict, output_retries=3)
    result = await bot.run("Is the bug fixed?", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == Verdict(fixed=True)
    events = await result.thread.timeline()
    [ask] = of_type(events, "injected")
    assert ask.data["text"] == "Return the final result by calling final_output."
    rejected, accepted = of_type(events, "output_validated")
    assert rejected.data["outcome"] == "rejected"
    assert rejected.data["errors"][0]["path"] == "/fixed"
    assert accepted.data["value"] == {"fixed": True}
    results = {e.data["call_id"]: e.data for e in of_type(events, "tool_result")}
    assert (results["c1"]["origin"], results["c1"]["is_error"]) == ("not_executed", True)
    assert "/fixed" in results["c1"]["preview"]  # the model is shown what was wrong
    assert results["c2"]["preview"] == '{"fixed":true}'
    assert of_type(events, "turn_completed")[-1].data == {"reason": "end_turn"}
    assert len(model.requests) == 3  # the accepted candidate ends the turn: no further call
    replayed = await result.thread.replay()
    assert (replayed.requests, replayed.mismatch) == (3, None)


async def test_output_invalid_after_the_retries(store: Store) -> None:
    model = scripted_model([use(call("final_output", fixed="no")), say("still plain")])
    bot = agent(name="t", model=model, output=Verdict, output_retries=1)
    result = await bot.run("Is the bug fixed?", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "output_invalid"
    ended = of_type(await result.thread.timeline(), "turn_completed")[-1]
    assert ended.data == {"reason": "output_invalid"}
    assert len(model.requests) == 1  # one retry allowed: the first failure was the last


def question_bot() -> Agent:
    return agent(name="t", tools=[ask_user], model=scripted_model([
        use(call("ask_user", "q1", question="Which color?", options=["red", "blue"])),
        say("Blue it is."),
    ]))


async def test_ask_user_parks_until_the_starter_answers(store: Store) -> None:
    bot = question_bot()
    parked = await bot.run("Paint it.", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    assert parked.reason == "awaiting_input"
    assert parked.pending == [Pending("input", "q1")]
    again = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(again, Parked)  # still waiting; nothing new recorded
    handle = await open_thread(store, parked.thread.id)
    for who, answer, code in [(BOB, "blue", "forbidden"), (ALICE, "green", "invalid_answer"),
                              (ALICE, ["red", "blue"], "invalid_answer")]:
        with pytest.raises(ControlError) as refused:
            await handle.answer("q1", answer, who)
        assert refused.value.code == code
    await handle.answer("q1", "  BLUE ", ALICE)
    with pytest.raises(ControlError) as twice:
        await handle.answer("q1", "red", ALICE)
    assert twice.value.code == "not_parked"
    [answered] = [e for e in await handle.timeline() if e.type == "tool_result"]
    assert (answered.data["origin"], answered.data["preview"]) == ("answered", "blue")
    assert answered.actor == {"kind": "user", "principal": ALICE.to_wire()}
    done = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(done, Completed)
    assert done.output == "Blue it is."
    parks = [e for e in await handle.timeline() if e.type == "parked"]
    assert len(parks) == 1
    assert parks[0].data["expires_at"] - parks[0].time == 24 * 60 * 60 * 1000


async def test_a_cancel_ends_the_question_it_was_parked_on(store: Store) -> None:
    """Digest §2.1: a cancel ends an open question's park (``resumed``) and the call is not
    executed; the next run ends the turn ``cancelled``. It once closed the call and left the
    park open: every later run returned ``Parked(awaiting_input)`` on a closed question."""
    bot = question_bot()
    parked = await bot.run("Paint it.", store=store, principal=ALICE)
    handle = await open_thread(store, parked.thread.id)
    await handle.cancel(ALICE)
    ended = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(ended, Cancelled), ended
    events = await handle.timeline()
    [result] = of_type(events, "tool_result")
    assert (result.data["origin"], result.data["preview"]) == (
        "not_executed", "not executed: cancelled")
    [resumed] = of_type(events, "resumed")
    assert resumed.data["address"] == {"id": "q1", "kind": "input"}
    assert [e.type for e in events][-2:] == ["cancelled", "turn_completed"]
    with pytest.raises(ControlError) as late:
        await handle.answer("q1", "blue", ALICE)
    assert late.value.code == "not_parked"


def test_threads_answer_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def park() -> str:
        store = sqlite(tmp_path / "store")
        try:
            result = await question_bot().run("Paint it.", store=store)
            assert isinstance(result, Parked)
            return result.thread.id
        finally:
            await store.close()

    thread_id = asyncio.run(park())
    store_args = ["--store", str(tmp_path / "store")]
    assert main(["answer", thread_id, "q1", "purple", *store_args]) == 1
    assert "invalid_answer" in capsys.readouterr().err
    assert main(["answer", thread_id, "q1", "red", *store_args]) == 0
    assert "answered q1" in capsys.readouterr().out
