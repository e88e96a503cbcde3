"""A thread is pinned to its config, permissions and budget included: a run with another
permission policy, thread budget, model parameter, tool or instructions is refused
``invalid_config`` before anything is written, and the message names each changed key path
with both values. Transport settings are not pinned; secrets are never shown. Runs on both
stores."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from threads import Budget, Completed, ConfigError, Permissions, Principal, agent, tool
from threads.run.agent import Agent
from threads.run.pinning import changes, describe
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")


class Refund(BaseModel):
    order: str


def support(refunded: list[str], *, script: list[Any] | None = None, **options: Any) -> Agent:
    async def refund(args: Refund, _ctx: Any) -> str:
        refunded.append(args.order)
        return f"refunded {args.order}"

    tools = [tool(name="refund", description="Refund an order.", input=Refund, execute=refund)]
    model = scripted_model(script or [use(call("refund", order="o-1")), say("done")])
    settings: dict[str, Any] = {"instructions": "Help.", "tools": tools} | options
    return agent(name="support", model=model, **settings)


async def lines_of(store: Store, thread_id: str) -> int:
    root = await store.root_branch(thread_id)
    return len(await store.stored_lines(root.branch_id))


async def refused(store: Store, thread_id: str, bot: Agent) -> str:
    """Run ``bot`` on the thread: it must be refused with nothing written; the message."""
    before = await lines_of(store, thread_id)
    with pytest.raises(ConfigError) as caught:
        await bot.run("refund o-1", thread=thread_id, store=store, principal=ALICE)
    assert caught.value.code == "invalid_config"
    assert await lines_of(store, thread_id) == before
    return caught.value.message


async def test_a_looser_permission_policy_is_refused_and_the_refund_never_runs(
    store: Store,
) -> None:
    refunded: list[str] = []
    first = await support(refunded, script=[say("hello")], permissions=Permissions(
        ask=["refund"])).run("hi", store=store, principal=ALICE)
    assert isinstance(first, Completed), first
    message = await refused(store, first.thread.id, support(refunded))
    assert 'changed: policy.permissions.ask: ["refund"] -> []' in message
    assert refunded == []  # main ran it: permission_decision allow, source default


async def test_another_mode_or_deny_rule_is_refused_too(store: Store) -> None:
    refunded: list[str] = []
    first = await support(refunded, script=[say("hello")], permissions=Permissions(
        deny=["refund"])).run("hi", store=store, principal=ALICE)
    assert isinstance(first, Completed), first
    looser = support(refunded, permissions=Permissions(mode="bypass", allow_bypass=True))
    message = await refused(store, first.thread.id, looser)
    assert 'policy.permissions.allow_bypass: false -> true' in message
    assert 'policy.permissions.deny: ["refund"] -> []' in message
    assert 'policy.permissions.mode: "default" -> "bypass"' in message
    assert refunded == []


async def test_another_thread_budget_is_refused_naming_the_limit(store: Store) -> None:
    refunded: list[str] = []
    first = await support(refunded, script=[say("hello")], budget=Budget(
        max_model_requests=3)).run("hi", store=store, principal=ALICE)
    assert isinstance(first, Completed), first
    message = await refused(store, first.thread.id, support(refunded, budget=Budget(
        max_model_requests=300)))
    assert "changed: policy.budget.max_model_requests: 3 -> 300" in message
    message = await refused(store, first.thread.id, support(refunded))
    assert 'policy.budget: {"max_model_requests":3} -> (none)' in message
    assert refunded == []


async def test_instructions_and_tools_changed_are_named_with_both_values(store: Store) -> None:
    refunded: list[str] = []
    first = await support(refunded, script=[say("hello")]).run(
        "hi", store=store, principal=ALICE)
    assert isinstance(first, Completed), first
    message = await refused(store, first.thread.id, support(refunded, instructions="Be rude."))
    assert 'changed: instructions: "Help." -> "Be rude."' in message
    other = tool(name="refund", description="Refund an order.", input=Refund,
                 execute=lambda args, ctx: "x", effect="read_only")
    extra = tool(name="look_up", description="Look up.", input=Refund,
                 execute=lambda args, ctx: "x", effect="read_only")
    message = await refused(store, first.thread.id, support(refunded, tools=[other, extra]))
    assert "tools.look_up: added" in message
    assert 'tools.refund.effect_class: "unguarded" -> "read_only"' in message
    again = await support(refunded, script=[say("hello"), say("still here")]).run(
        "hi", thread=first.thread.id, store=store, principal=ALICE)
    assert isinstance(again, Completed), again  # the same config: the thread goes on


def test_transport_settings_an_older_release_recorded_are_not_compared() -> None:
    adapter = {"name": "openai", "settings": {"api": "chat"}, "version": "1"}
    legacy = {"name": "openai", "version": "1",
              "settings": {"api": "chat", "endpoint": "127.0.0.1", "streaming": True}}
    fallback = {"adapter": legacy, "model": {"name": "m2", "provider": "openai"}}
    pinned = {"adapter": legacy, "policy": {"fallback": [fallback]}}
    now = {"adapter": adapter, "policy": {"fallback": [fallback | {"adapter": adapter}]}}
    assert changes(pinned, now) == []
    other_api = {"adapter": adapter | {"settings": {"api": "responses"}}, "policy": now["policy"]}
    assert describe(changes(pinned, other_api)) == (
        'changed: adapter.settings.api: "chat" -> "responses"'
    )


def test_secrets_in_a_pinned_value_are_never_shown() -> None:
    pinned = {"model_params": {"extra_headers": {"Authorization": "Bearer sk-1"}, "api_key": "a"}}
    now = {"model_params": {"extra_headers": {"Authorization": "Bearer sk-2"}, "api_key": "b"}}
    text = describe(changes(pinned, now))
    assert "sk-" not in text, text
    assert '"a"' not in text, text
    assert '"b"' not in text, text
    assert "model_params.api_key: [redacted] -> [redacted]" in text
    assert "model_params.extra_headers.Authorization: [redacted] -> [redacted]" in text
    custom = describe(changes({"model_params": {"extra_headers": {"X-Custom": "v1"}}},
                              {"model_params": {"extra_headers": {"X-Custom": "v2"}}}))
    assert custom == "changed: model_params.extra_headers.X-Custom: [redacted] -> [redacted]"
    nested = describe(changes({"model_params": {"auth": {"X-Api-Key": "k1", "region": "eu"}}},
                              {"model_params": {"auth": {"X-Api-Key": "k2", "region": "us"}}}))
    assert nested == (
        "changed: model_params.auth.X-Api-Key: [redacted] -> [redacted];"
        ' model_params.auth.region: "eu" -> "us"'
    )
    tokens = describe(changes({"model_params": {"max_tokens": 5}},
                              {"model_params": {"max_tokens": 9}}))
    assert tokens == "changed: model_params.max_tokens: 5 -> 9"  # a count, not a credential
