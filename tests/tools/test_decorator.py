"""``@tool`` on typed functions: the name, description and input model come from the function;
it makes the same ``Tool`` (spec, config hash) as the explicit form; input is validated before
anything runs; sync functions run off the event loop; misshapen functions are refused at
definition time."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from threads import (
    Completed,
    ConfigError,
    Reconcile,
    RunContext,
    agent,
    tool,
)
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use
from threads.tools.tool import Found, LookupOutcome, NotFound


class ChargeCard(BaseModel):
    amount_cents: int
    note: str = ""


applied: list[tuple[int, str, str]] = []


async def charge_card(amount_cents: int, ctx: RunContext, note: str = "") -> str:
    """Charge the customer's card."""
    applied.append((amount_cents, note, ctx.effect_key))
    return f"charged {amount_cents}"


async def charge_explicit(args: ChargeCard, ctx: RunContext) -> str:
    return await charge_card(args.amount_cents, ctx, args.note)


DAY_MS = 24 * 60 * 60 * 1000


def test_decorator_and_explicit_form_make_the_same_tool() -> None:
    decorated = tool(effect="idempotent", dedup_window_ms=DAY_MS)(charge_card)
    explicit = tool(
        name="charge_card",
        description="Charge the customer's card.",
        input=ChargeCard,
        execute=charge_explicit,
        effect="idempotent",
        dedup_window_ms=DAY_MS,
    )
    assert decorated.spec() == explicit.spec()
    assert "ctx" not in decorated.spec()["input_schema"]["properties"]
    model = scripted_model([say("x")])
    one = agent(name="a", model=model, tools=[decorated]).config()
    two = agent(name="a", model=model, tools=[explicit]).config()
    assert one["config_hash"] == two["config_hash"]


class Deps(BaseModel):
    shop: str


async def test_a_parameterized_run_context_is_the_context_not_a_field(store: Store) -> None:
    """``ctx: RunContext[Deps]`` (what a typed program writes) receives the run's context, as a
    bare ``RunContext`` does; it is not a field the model fills."""

    @tool(effect="read_only")
    def shop_name(ctx: RunContext[Deps]) -> str:
        """Name the shop."""
        return ctx.deps.shop

    assert shop_name.spec()["input_schema"].get("properties", {}) == {}
    bot = agent(name="a", model=scripted_model([use(call("shop_name")), say("ok")]),
                tools=[shop_name])
    done = await bot.run("go", store=store, deps=Deps(shop="Kettles"))
    assert isinstance(done, Completed)
    [result] = [e.data for e in await done.thread.timeline() if e.type == "tool_result"]
    assert result["preview"] == "Kettles"


async def test_a_decorated_tool_runs_with_validated_arguments_and_its_context(
    store: Store,
) -> None:
    applied.clear()
    charge = tool(effect="idempotent", dedup_window_ms=DAY_MS)(charge_card)
    model = scripted_model([use(call("charge_card", amount_cents="1250")), say("done")])
    result = await agent(name="a", model=model, tools=[charge]).run("go", store=store)
    assert isinstance(result, Completed)
    [(amount, note, key)] = applied
    assert (amount, note) == (1250, "")  # coerced by the model, default filled in
    events = await result.thread.timeline()
    [called] = [e for e in events if e.type == "tool_call"]
    assert key.endswith(":" + called.data["call_id"])  # the call's effect key
    types = [e.type for e in events]
    assert types.index("effect_begin") < types.index("effect_commit")
    [res] = [e for e in events if e.type == "tool_result"]
    assert res.data["preview"] == "charged 1250"


async def test_bad_input_is_a_coded_error_for_the_model_and_nothing_begins(
    store: Store,
) -> None:
    applied.clear()
    charge = tool(effect="idempotent", dedup_window_ms=DAY_MS)(charge_card)
    model = scripted_model([use(call("charge_card", amount_cents="lots")), say("sorry")])
    result = await agent(name="a", model=model, tools=[charge]).run("go", store=store)
    assert isinstance(result, Completed)
    assert applied == []
    events = await result.thread.timeline()
    assert "effect_begin" not in [e.type for e in events]
    [res] = [e for e in events if e.type == "tool_result"]
    assert res.data["is_error"] is True
    assert res.data["origin"] == "not_executed"
    assert res.data["preview"].startswith("invalid input for charge_card: amount_cents:")
    # the model was shown the error as the call's result
    second = model.requests[1].messages[-1]
    assert (second["role"], second["is_error"]) == ("tool", True)


async def test_sync_functions_run_in_a_worker_thread_and_never_block_the_loop(
    store: Store,
) -> None:
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()
    release = threading.Event()
    running = asyncio.Event()
    seen: list[int] = []

    @tool(effect="read_only")
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        seen.append(threading.get_ident())
        loop.call_soon_threadsafe(running.set)
        assert release.wait(10), "the event loop was blocked while the tool ran"
        return {"order": order_id, "state": "shipped"}

    async def let_it_finish() -> None:
        await running.wait()  # the loop is free while the sync tool runs
        release.set()

    model = scripted_model([use(call("lookup_order", order_id="42")), say("shipped")])
    bot = agent(name="a", model=model, tools=[lookup_order])
    result, _ = await asyncio.gather(bot.run("go", store=store), let_it_finish())
    assert isinstance(result, Completed)
    assert seen != [loop_thread]
    assert len(seen) == 1
    [res] = [e for e in await result.thread.timeline() if e.type == "tool_result"]
    assert res.data["preview"] == '{"order":"42","state":"shipped"}'


async def test_overrides_annotated_fields_and_model_results(store: Store) -> None:
    class Refund(BaseModel):
        refund_id: str
        cents: int

    async def find(effect_key: str, ctx: RunContext) -> LookupOutcome:
        return NotFound()

    @tool(
        name="refund",
        description="Refund a charge.",
        effect="reconcilable",
        reconcile=Reconcile(lookup=find, finality="final"),
    )
    async def do_refund(
        cents: Annotated[int, Field(gt=0, description="How much to refund, in cents.")],
    ) -> Refund:
        return Refund(refund_id="r1", cents=cents)

    spec = do_refund.spec()
    assert (spec["name"], spec["description"], spec["effect_class"]) == (
        "refund", "Refund a charge.", "reconcilable",
    )
    cents = spec["input_schema"]["properties"]["cents"]
    assert (cents["description"], cents["exclusiveMinimum"]) == ("How much to refund, in cents.", 0)
    model = scripted_model([use(call("refund", cents=0)), use(call("refund", cents=5)), say("ok")])
    result = await agent(name="a", model=model, tools=[do_refund]).run("go", store=store)
    assert isinstance(result, Completed)
    first, second = [e for e in await result.thread.timeline() if e.type == "tool_result"]
    assert first.data["is_error"] is True  # gt=0 is enforced like any input model
    assert second.data["preview"] == '{"cents":5,"refund_id":"r1"}'


async def test_the_explicit_form_accepts_a_sync_execute(store: Store) -> None:
    def read(args: ChargeCard, ctx: RunContext) -> str:
        return f"read {args.amount_cents} off the loop: {threading.get_ident() != loop_id}"

    loop_id = threading.get_ident()
    reader = tool(name="read", description="Read.", input=ChargeCard, execute=read,
                  effect="read_only")
    model = scripted_model([use(call("read", amount_cents=3)), say("ok")])
    result = await agent(name="a", model=model, tools=[reader]).run("go", store=store)
    [res] = [e for e in await result.thread.timeline() if e.type == "tool_result"]
    assert res.data["preview"] == "read 3 off the loop: True"


def _no_doc(order_id: str) -> str:
    return order_id


def _untyped(order_id):  # type: ignore[no-untyped-def]
    return order_id


def _star(*order_ids: str) -> str:
    """Many."""
    return ""


def _two_contexts(a: RunContext, b: RunContext) -> str:
    """Two."""
    return ""


def _private(_secret: str) -> str:
    """Private."""
    return ""


@pytest.mark.parametrize(
    ("fn", "name", "says"),
    [
        (_no_doc, "no_doc", "a description is required"),
        (_untyped, "untyped", "annotate parameter order_id"),
        (_star, "star", "plain named parameter"),
        (_two_contexts, "two", "only one parameter may be a RunContext"),
        (_private, "private", "starts with '_'"),
        (lambda: "x", None, "must match"),
    ],
)
def test_misshapen_functions_are_refused_at_definition(
    fn: Any, name: str | None, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        tool(name=name)(fn) if name is not None else tool(fn)
    assert refused.value.code == "invalid_config"
    assert says in refused.value.message


def test_effect_rules_still_apply_to_decorated_tools() -> None:
    with pytest.raises(ConfigError, match="needs dedup_window_ms"):
        tool(effect="idempotent")(charge_card)
    with pytest.raises(ConfigError, match="reconcile only goes with"):
        tool(reconcile=Reconcile(lookup=_found))(charge_card)


async def _found(effect_key: str, ctx: RunContext) -> LookupOutcome:
    return Found("yes")
