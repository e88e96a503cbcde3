"""A turn's recorded ending and the run's result agree (issue 30 item 6): a turn that ends
``turn_completed{reason: error}`` returns ``Failed`` with the code the ending records, and
``model_error`` when it records none (a code the format has no place for, an adapter's own, is
named in the message instead). A later ``run(None)`` with nothing to do returns the same
outcome, read back from the recorded ending: never ``Completed`` for a turn that failed (a
turn that ended ``context_exhausted``, ``model_unavailable`` or ``output_invalid`` reads back
``Failed`` with that code, as its run returned it)."""

from __future__ import annotations

from typing import Any

from threads import Completed, Failed, Principal, agent
from threads.log.lines import Event
from threads.models.protocol import ModelCallError
from threads.store.protocol import Store
from threads.testing.scripted import Fail, say, scripted_model

ALICE = Principal("api", "acme", "alice")


def ending(events: list[Event]) -> Event:
    return [e for e in events if e.type == "turn_completed"][-1]


def terminal(code: str) -> Fail:
    return Fail(ModelCallError(f"scripted {code}", reason="provider_error",
                               provider_outcome="failed", code=code))


async def rerun_agrees(bot: Any, store: Store, thread_id: str, ended: Event) -> Any:
    """``run(None)`` on the thread: appends nothing, and returns what the ending says."""
    head = (await store.root_branch(thread_id)).head_seq
    again = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert (await store.root_branch(thread_id)).head_seq == head
    if isinstance(again, Failed):
        assert again.error.seq == ended.seq  # the ending it read
    return again


async def test_an_error_without_a_code_is_model_error_live_and_on_rerun(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("...", stop_reason="pause_turn")] * 4))
    result = await bot.run("find it", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    ended = ending(await result.thread.timeline())
    assert ended.data == {"reason": "error"}
    assert result.error.code == "model_error"
    again = await rerun_agrees(bot, store, result.thread.id, ended)
    assert isinstance(again, Failed)
    assert again.error.code == "model_error"


async def test_a_code_the_format_carries_is_recorded_and_returned(store: Store) -> None:
    model = scripted_model([terminal("secret_in_provider_output"), say("never")])
    bot = agent(name="t", model=model)
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    ended = ending(await result.thread.timeline())
    assert ended.data == {"code": "secret_in_provider_output", "reason": "error"}
    assert result.error.code == "secret_in_provider_output"
    again = await rerun_agrees(bot, store, result.thread.id, ended)
    assert isinstance(again, Failed)
    assert again.error.code == "secret_in_provider_output"


async def test_a_code_the_format_lacks_is_model_error_naming_it(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([terminal("quota_exceeded"), say("never")]))
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    ended = ending(await result.thread.timeline())
    assert ended.data == {"reason": "error"}
    assert result.error.code == "model_error"
    assert result.error.message.startswith("quota_exceeded: ")
    again = await rerun_agrees(bot, store, result.thread.id, ended)
    assert isinstance(again, Failed)
    assert again.error.code == "model_error"


async def test_the_other_failed_endings_read_back_as_the_run_returned_them(
    store: Store,
) -> None:
    model = scripted_model([say("Half an answer", stop_reason="context_window_exceeded")])
    bot = agent(name="t", model=model)
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "context_exhausted"
    ended = ending(await result.thread.timeline())
    again = await rerun_agrees(bot, store, result.thread.id, ended)
    assert isinstance(again, Failed)
    assert again.error.code == "context_exhausted"


async def test_a_completed_turn_still_reads_back_completed(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("hello")]))
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    again = await rerun_agrees(bot, store, result.thread.id, ending(
        await result.thread.timeline()))
    assert isinstance(again, Completed)
    assert again.output == "hello"
