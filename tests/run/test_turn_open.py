"""Opening a turn for a caller that starts its run afterwards (``threads.run.open_next_turn``,
what a host's ``POST /v1/runs`` takes): the same refusals and pin check a library run makes,
then the ``user_input`` with its idempotency receipt in one transaction. A refusal records
nothing, except ``max_turns``, which records ``budget_exceeded`` (and no input), as a library
run does."""

from __future__ import annotations

import pytest

from threads import BudgetExhausted, Completed, ControlError, Principal, agent
from threads.errors import ConfigError, ThreadsError
from threads.run import Budget, RunKey, TurnRequest, create_thread, open_next_turn
from threads.store.protocol import Store
from threads.store.receipts import START_RUN
from threads.testing.scripted import say, scripted_model

ALICE = Principal("api", "acme", "alice")


async def types_of(store: Store, branch_id: str) -> list[str]:
    return [e.type for e in (await store.read_chain(branch_id)).events]


async def test_a_new_thread_and_its_receipt_are_one_transaction(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("hi")]))
    key = RunKey("k-1", "api/acme/alice", "ab" * 32)
    made = await create_thread(store, bot, TurnRequest("hello", ALICE, key=key))
    branch_id = made.header.branch_id
    assert await types_of(store, branch_id) == ["thread_started", "user_input"]
    receipt = await store.get_receipt("acme", START_RUN, "k-1")
    assert receipt is not None
    assert (receipt.thread_id, receipt.run_id) == (made.header.thread_id, made.input.event_id)
    with pytest.raises(ThreadsError) as again:  # the key is taken: nothing else is created
        await create_thread(store, bot, TurnRequest("hello", ALICE, key=key))
    assert again.value.code == "idempotency_key_reused"
    assert len(await store.list_threads("acme")) == 1


async def test_the_next_turn_is_opened_with_its_receipt(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("one"), say("two")]))
    first = await bot.run("one", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    budget = Budget(max_model_requests=3)
    request = TurnRequest("two", ALICE, budget, RunKey("k-2", "api/acme/alice", "cd" * 32))
    opened = await open_next_turn(store, bot, branch.branch_id, request)
    assert opened.input.data == {"budget": budget.to_wire(), "source": "api", "text": "two"}
    assert opened.fold.turn is not None  # the turn is open for the run that follows
    receipt = await store.get_receipt("acme", START_RUN, "k-2")
    assert receipt is not None
    assert receipt.run_id == opened.input.event_id
    second = await bot.run(None, store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(second, Completed)
    assert second.output == "two"


async def test_refusals_record_nothing(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("one")]))
    first = await bot.run("one", store=store, principal=ALICE)
    branch_id = (await store.root_branch(first.thread.id)).branch_id
    other_name = agent(name="u", model=scripted_model([]))
    other_config = agent(name="t", model=scripted_model([]), instructions="Be terse.")
    with pytest.raises(ConfigError) as by_name:
        await open_next_turn(store, other_name, branch_id, TurnRequest("x", ALICE))
    assert by_name.value.code == "invalid_config"
    with pytest.raises(ConfigError) as by_config:
        await open_next_turn(store, other_config, branch_id, TurnRequest("x", ALICE))
    assert "instructions" in by_config.value.message
    await open_next_turn(store, bot, branch_id, TurnRequest("x", ALICE))
    before = await types_of(store, branch_id)
    with pytest.raises(ControlError) as still_open:
        await open_next_turn(store, bot, branch_id, TurnRequest("y", ALICE))
    assert still_open.value.code == "branch_not_runnable"
    assert await types_of(store, branch_id) == before


async def test_max_turns_records_budget_exceeded_and_no_input(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("one")]), budget=Budget(max_turns=1))
    first = await bot.run("one", store=store, principal=ALICE)
    branch_id = (await store.root_branch(first.thread.id)).branch_id
    with pytest.raises(ControlError) as spent:
        await open_next_turn(store, bot, branch_id, TurnRequest("two", ALICE))
    assert spent.value.code == "budget_exhausted"
    assert (await types_of(store, branch_id))[-2:] == ["turn_completed", "budget_exceeded"]
    library = await bot.run("two", store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(library, BudgetExhausted)  # the library run opens turns the same way
    assert library.budget.limit == "max_turns"
    assert (await types_of(store, branch_id))[-2:] == ["budget_exceeded", "budget_exceeded"]
