"""Questions on resume, on both stores: a question whose park expired with no answer recorded is
closed (``tool_result{not_executed, "no answer"}`` + ``resumed``) and the turn goes on; a
recorded ``ask_user`` call whose input can't be asked (rule 48: here options equal under the
format's ``norm``) is closed ``not_executed`` instead of parking. The log each run leaves reads
back under the reader's question rules."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from threads import Completed, FakeClock, Parked, Principal, agent, ask_user, open_thread
from threads.log.lines import Event
from threads.run.questions import QUESTION_TTL_MS
from threads.store.protocol import Store
from threads.testing import call, say, scripted_model, use
from threads.tools.tool import RunContext, tool

ALICE = Principal("api", "acme", "alice")


async def timeline(store: Store, thread_id: str) -> list[Event]:
    return list(await (await open_thread(store, thread_id)).timeline())


async def test_an_expired_question_is_closed_and_the_turn_goes_on(store: Store) -> None:
    bot = agent(name="t", tools=[ask_user], model=scripted_model([
        use(call("ask_user", "q1", question="Which color?", options=["red", "blue"])),
        say("No answer came; I kept it red."),
    ]))
    parked = await bot.run("Paint it.", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    clock = store.clock
    assert isinstance(clock, FakeClock)
    clock.advance(QUESTION_TTL_MS - 1)
    early = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(early, Parked)  # not expired yet: nothing recorded
    clock.advance(1)
    done = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(done, Completed), done
    assert done.output == "No answer came; I kept it red."
    events = await timeline(store, parked.thread.id)
    [closed] = [e for e in events if e.type == "tool_result"]
    assert (closed.data["origin"], closed.data["is_error"], closed.data["preview"]) == (
        "not_executed", True, "no answer",
    )
    assert closed.actor == {"kind": "host"}
    after = events[events.index(closed) + 1]
    assert after.type == "resumed"
    assert after.data["address"] == {"id": "q1", "kind": "input"}
    assert len([e for e in events if e.type == "parked"]) == 1


class LooseQuestion(BaseModel):
    """What an older or foreign writer let through: no rule on the options."""

    question: str
    options: list[str] | None = None
    multi_select: bool = False


async def _never(args: LooseQuestion, ctx: RunContext) -> str:
    raise AssertionError("a question is never executed")


LOOSE_ASK_USER = tool(
    name="ask_user", description="Ask the user.", input=LooseQuestion, execute=_never,
    effect="read_only",
)


@pytest.mark.parametrize("options", [["Red", " red"], ["\ufeff", "blue"], ["only"]])
async def test_a_recorded_question_that_cannot_be_asked_is_closed_not_parked(
    store: Store, options: list[str]
) -> None:
    bot = agent(name="t", tools=[LOOSE_ASK_USER], model=scripted_model([
        use(call("ask_user", "q1", question="Which color?", options=options)),
        say("I'll pick one myself."),
    ]))
    done = await bot.run("Paint it.", store=store, principal=ALICE)
    assert isinstance(done, Completed), done
    events = await timeline(store, done.thread.id)
    assert not [e for e in events if e.type == "parked"]
    [closed] = [e for e in events if e.type == "tool_result"]
    assert (closed.data["origin"], closed.data["is_error"]) == ("not_executed", True)
    assert closed.data["preview"].startswith("invalid input: ")
