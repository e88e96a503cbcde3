"""Provider output that breaks the log format: normalized where a faithful mapping exists,
otherwise refused as ``Failed(model_error)`` with nothing of the reply recorded.

Either way the store afterwards verifies (``threads verify --store``), exports and re-imports
byte-identically, and nothing raises out of ``run()``. A property test feeds random replies
through the scripted model and through the OpenAI Chat adapter's fake (the official SDK on
loopback); a provider call id outside the pattern travels back to the provider unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from threads import Completed, Failed, FakeClock, Principal, agent, sqlite, tool
from threads.cli.main import main
from threads.models.normalize import CALL_ID
from threads.models.protocol import Usage
from threads.openai import openai
from threads.run.agent import Agent
from threads.store.protocol import Store
from threads.store.sqlite import SQLiteStore
from threads.store.transfer import export_bundle, import_log
from threads.testing.fake_providers import OpenAIFake, ScriptedToolCall, ScriptedTurn
from threads.testing.scripted import Reply, ToolUse, say, scripted_model

ALICE = Principal("api", "acme", "alice")


class Free(BaseModel, extra="allow"):
    """Any arguments (the tool sees whatever the model sent)."""


def _bot(model: Any) -> Agent:
    async def echo(args: Free, ctx: Any) -> str:
        return "ok"

    return agent(
        name="p", model=model,
        tools=[tool(name="echo", description="Echo.", input=Free, execute=echo,
                    effect="read_only")],
    )


async def _check_store(store: Store, tmp_path: Path) -> None:
    """``verify --store`` accepts it (a SQLite store: the CLI names a store by its directory,
    and a test's Postgres schema has no URL), and every branch exports and re-imports
    byte-identically (as a bundle, into a fresh store, which verifies every line)."""
    if isinstance(store, SQLiteStore):
        assert await asyncio.to_thread(main, ["verify", "--store", str(store.root)]) == 0
    for root in await store.list_threads():
        bundle = await export_bundle(store, root.branch_id)
        other = sqlite(tmp_path / f"copy-{root.branch_id}", clock=FakeClock())
        try:
            result = await import_log(other, bundle, tenant_id=root.tenant_id)
            assert result.missing_artifacts == ()
            assert await export_bundle(other, root.branch_id) == bundle
        finally:
            await other.close()


def _reply(*calls: ToolUse, usage: Usage | None = None) -> Reply:
    return Reply(tool_calls=calls, usage=usage or Usage(10, 5))


def _call_ids(events: list[Any]) -> list[str]:
    return [e.data["call_id"] for e in events if e.type == "tool_call"]


# ---- normalized ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "provider_ids",
    [["functions.echo:0"], ["x" * 300], ["call_1", "call_1"], ["über/ä"]],
    ids=["colon", "300_chars", "duplicate", "unicode"],
)
async def test_a_provider_call_id_outside_the_pattern_gets_a_valid_one(
    store: Store, tmp_path: Path, provider_ids: list[str]
) -> None:
    model = scripted_model(
        [_reply(*(ToolUse("echo", {"n": i}, pid) for i, pid in enumerate(provider_ids))),
         say("done")]
    )
    result = await _bot(model).run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    ids = _call_ids(await result.thread.timeline())
    assert len(ids) == len(set(ids)) == len(provider_ids)
    assert all(CALL_ID.match(i) for i in ids)
    # The next request names the calls by the recorded ids and maps them back to the
    # provider's own ids, in order.
    second = model.requests[-1]
    assert [second.provider_call_ids.get(i, i) for i in ids] == provider_ids
    await _check_store(store, tmp_path)


async def test_an_id_reused_in_a_later_reply_is_kept_apart(
    store: Store, tmp_path: Path
) -> None:
    model = scripted_model(
        [_reply(ToolUse("echo", {}, "call_0")), _reply(ToolUse("echo", {}, "call_0")),
         say("done")]
    )
    result = await _bot(model).run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    first, second = _call_ids(await result.thread.timeline())
    assert first == "call_0"
    assert second != first
    assert model.requests[-1].provider_call_ids == {second: "call_0"}
    await _check_store(store, tmp_path)


async def test_usage_outside_the_safe_range_is_recorded_as_unknown(
    store: Store, tmp_path: Path
) -> None:
    model = scripted_model([Reply(text="hi", usage=Usage(-5, 2**60, cache_read_tokens=3))])
    result = await _bot(model).run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    [response] = [e for e in await result.thread.timeline() if e.type == "model_response"]
    assert response.data["usage"] == {
        "input_tokens": None, "output_tokens": None, "cache_read_tokens": 3,
    }
    await _check_store(store, tmp_path)


async def test_an_integer_a_double_holds_exactly_is_kept_as_that_double(
    store: Store, tmp_path: Path
) -> None:
    model = scripted_model([_reply(ToolUse("echo", {"big": 2**64}, "c1")), say("done")])
    result = await _bot(model).run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    [call] = [e for e in await result.thread.timeline() if e.type == "tool_call"]
    # Written as the double's shortest form, 18446744073709552000: the same double as 2^64.
    assert b'"input":{"big":18446744073709552000}' in call.line
    assert float(call.data["input"]["big"]) == 2**64
    await _check_store(store, tmp_path)


# ---- refused -------------------------------------------------------------------------------


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"n": value}
    return value


@pytest.mark.parametrize(
    "reply",
    [
        _reply(ToolUse("echo", {"x": math.nan}, "c1")),
        _reply(ToolUse("echo", {"x": math.inf}, "c1")),
        _reply(ToolUse("echo", {"x": 2**64 + 1}, "c1")),
        _reply(ToolUse("echo", _nested(70), "c1")),
        _reply(ToolUse("Bad-Name", {}, "c1")),
        Reply(text="x" * (1024 * 1024 + 10)),
        _reply(ToolUse("echo", {"x": "y" * (1024 * 1024)}, "c1")),
    ],
    ids=["nan", "infinity", "2^64+1", "70_deep", "bad_tool_name", "huge_text", "huge_args"],
)
async def test_a_reply_with_no_faithful_form_fails_with_model_error_and_records_nothing(
    store: Store, tmp_path: Path, reply: Reply
) -> None:
    result = await _bot(scripted_model([reply])).run("go", store=store, principal=ALICE)
    assert isinstance(result, Failed), result
    assert result.error.code == "model_error"
    types = [e.type for e in await result.thread.timeline()]
    assert "model_response" not in types
    assert "tool_call" not in types
    assert types[-2:] == ["model_attempt_abandoned", "turn_completed"]
    await _check_store(store, tmp_path)


# ---- through the OpenAI SDK ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def _openai_chat(streaming: bool) -> AsyncIterator[tuple[OpenAIFake, Any]]:
    async with OpenAIFake() as fake:
        model = openai("gpt-test", api_key="sk-test-normalize", base_url=fake.base_url,
                       context_window=128_000, max_output_tokens=1024, api="chat",
                       streaming=streaming)
        try:
            yield fake, model
        finally:
            await model.aclose()


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "plain"])
async def test_a_kimi_style_call_id_travels_back_to_the_provider(
    store: Store, tmp_path: Path, streaming: bool
) -> None:
    async with _openai_chat(streaming) as (fake, model):
        fake.script(
            ScriptedTurn(tool_calls=[
                ScriptedToolCall("functions.echo:0", "echo", ['{"a": 1}']),
                ScriptedToolCall("functions.echo:1", "echo", ['{"a": 2}']),
                ScriptedToolCall("", "echo", ['{"a": 3}']),  # a server that sends no id
            ]),
            ScriptedTurn(text_chunks=["done"]),
        )
        result = await _bot(model).run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    recorded = _call_ids(await result.thread.timeline())
    assert all(CALL_ID.match(i) for i in recorded)
    body = fake.requests[-1].json()
    [assistant] = [m for m in body["messages"] if m["role"] == "assistant"]
    sent = ["functions.echo:0", "functions.echo:1", ""]
    assert [c["id"] for c in assistant["tool_calls"]] == sent
    assert [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"] == sent
    await _check_store(store, tmp_path)


# ---- property: any reply ends coded or in a store that verifies ------------------------------

_ids = st.one_of(
    st.sampled_from(["call_1", "call_1", "functions.echo:0", "", "x" * 300, "pc_00"]),
    st.text(max_size=40),
)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=12,
)
_names = st.one_of(st.just("echo"), st.just("missing_tool"), st.text(max_size=12))
_tokens = st.one_of(st.none(), st.integers(min_value=-(2**60), max_value=2**64))
_usage = st.builds(Usage, _tokens, _tokens, _tokens, _tokens, _tokens)
_stops = st.one_of(st.none(), st.sampled_from(["end_turn", "tool_use", "max_tokens", "bogus"]))


def _deepen(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = {"d": value}
    return value


_calls = st.lists(
    st.builds(
        ToolUse, _names,
        st.builds(_deepen, st.dictionaries(st.text(max_size=6), _values, max_size=3),
                  st.sampled_from([0, 0, 0, 70])),
        _ids,
    ),
    max_size=3,
)
_replies = st.builds(
    Reply, st.one_of(st.none(), st.text(max_size=30)), st.builds(tuple, _calls), _usage, _stops,
)

PROPERTY_EXAMPLES = 150


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(reply=_replies)
def test_property_any_scripted_reply_fails_coded_or_leaves_a_store_that_verifies(
    tmp_path_factory: pytest.TempPathFactory, reply: Reply
) -> None:
    asyncio.run(_one_reply(tmp_path_factory.mktemp("p"), reply))


async def _one_reply(tmp_path: Path, reply: Reply) -> None:
    store = sqlite(tmp_path / "store", clock=FakeClock())
    try:
        model = scripted_model([reply, say("after"), say("after"), say("after")])
        result = await _bot(model).run("go", store=store, principal=ALICE)
        if isinstance(result, Failed):
            assert result.error.code in {"model_error"}, result
        await _check_store(store, tmp_path)
    finally:
        await store.close()


_wire_ids = st.one_of(st.sampled_from(["functions.echo:0", "", "y" * 300, "call_a"]),
                      st.text(min_size=0, max_size=30))
_arguments = st.one_of(
    st.sampled_from(['{"a": NaN}', '{"a": 1e400}', '{"a": 18446744073709551616}',
                     '{"a": 18446744073709551617}', "[1]", "not json", "{}",
                     "{" * 70 + "}" * 70, '{"a": "\\ud800"}']),
    st.dictionaries(st.text(max_size=5), _scalars.filter(
        lambda v: not isinstance(v, float) or math.isfinite(v)), max_size=3).map(json.dumps),
)
_wire_calls = st.lists(st.builds(lambda i, n, a: ScriptedToolCall(i, n, [a]),
                                 _wire_ids, st.sampled_from(["echo", "Bad-Name"]), _arguments),
                       max_size=3)

WIRE_EXAMPLES = 40


@settings(max_examples=WIRE_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(calls=_wire_calls)
def test_property_any_openai_chat_reply_fails_coded_or_leaves_a_store_that_verifies(
    tmp_path_factory: pytest.TempPathFactory, calls: list[ScriptedToolCall]
) -> None:
    asyncio.run(_one_wire_reply(tmp_path_factory.mktemp("w"), calls))


async def _one_wire_reply(tmp_path: Path, calls: list[ScriptedToolCall]) -> None:
    store = sqlite(tmp_path / "store", clock=FakeClock())
    try:
        async with _openai_chat(streaming=True) as (fake, model):
            fake.script(ScriptedTurn(tool_calls=calls), *[ScriptedTurn(text_chunks=["ok"])] * 3)
            result = await _bot(model).run("go", store=store, principal=ALICE)
        if isinstance(result, Failed):
            assert result.error.code == "model_error", result
        await _check_store(store, tmp_path)
    finally:
        await store.close()
