"""Logs our runs write pass our own verifier (full admission, chain, head, semantic rules) and,
when the shared conformance folder is present, every line validates against its JSON Schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from shared_data import SCHEMA, needs
from threads import (
    Budget,
    Permissions,
    Price,
    Principal,
    agent,
    open_thread,
    tool,
)
from threads.log.verify import verify_export
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")


class Arg(BaseModel):
    x: str


async def _noop(args: Arg, ctx: Any) -> str:
    return f"did {args.x}"


async def _busy_thread(store: Store) -> bytes:
    """A thread that uses most of the loop: every effect class, an approval, a park resolved by
    a person, a budget stop."""
    tools = [
        tool(name="look", description="Read.", input=Arg, execute=_noop, effect="read_only"),
        tool(
            name="pay",
            description="Pay.",
            input=Arg,
            execute=_noop,
            effect="idempotent",
            dedup_window_ms=60_000,
        ),
        tool(name="mail", description="Mail.", input=Arg, execute=_noop),
    ]
    script = [
        use(call("look", x="a"), call("pay", x="b")),
        use(call("mail", x="c")),
        say("done", usage=(None, 3)),
        say("never"),
    ]
    bot = agent(
        name="busy",
        model=scripted_model(script, price=Price(input=3, output=15)),
        tools=tools,
        permissions=Permissions(ask=("mail",)),
        budget=Budget(max_model_requests=3),
    )
    parked = await bot.run("go", store=store, principal=ALICE)
    handle = await open_thread(store, parked.thread.id)
    [pending] = await handle.pending_approvals()
    await handle.approve(pending.challenge_id, ALICE)
    await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    await bot.run("again", store=store, thread=parked.thread.id, principal=ALICE)
    return await handle.export()


async def test_our_logs_pass_our_verifier(store: Store) -> None:
    data = await _busy_thread(store)
    verified = verify_export(data)
    assert verified.head_verified
    types = {e.type for e in verified.events}
    assert {
        "approval_requested",
        "approval_granted",
        "effect_begin",
        "effect_commit",
        "budget_exceeded",
        "turn_completed",
    } <= types


@needs(SCHEMA, "the shared event schema")
async def test_our_logs_pass_the_conformance_schema(store: Store) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    data = await _busy_thread(store)
    for number, line in enumerate(data.splitlines(), start=1):
        errors = list(validator.iter_errors(json.loads(line)))
        assert not errors, f"line {number}: {errors[0].message}"


async def assert_export_is_valid(handle: Any) -> None:
    """The thread exports, our verifier accepts it, and each line fits the shared schema."""
    data = await handle.export()
    assert verify_export(data).head_verified
    if SCHEMA.exists():
        jsonschema = pytest.importorskip("jsonschema")
        validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
        for number, line in enumerate(data.splitlines(), start=1):
            errors = list(validator.iter_errors(json.loads(line)))
            assert not errors, f"line {number}: {errors[0].message}"
