"""A tool's return value never turns a done effect into a failed call: values are encoded the way
Pydantic encodes them, text is made valid UTF-8, and whatever can't be encoded after the tool
returned is a successful result that says so. Tool exceptions are logged with their traceback."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from threads import Completed, Principal, agent, tool
from threads.cli.main import main as cli_main
from threads.log.lines import Event
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use
from threads.tools.encode import describe_exception, result_text, valid_text

ALICE = Principal("api", "acme", "alice")


class Note(BaseModel):
    text: str


class Receipt(BaseModel):
    id: str
    amount: decimal.Decimal
    at: datetime.datetime


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            Receipt(
                id="r1",
                amount=decimal.Decimal("9.90"),
                at=datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC),
            ),
            {"amount": "9.90", "at": "2026-01-02T03:04:00Z", "id": "r1"},
        ),
        (datetime.date(2026, 12, 1), "2026-12-01"),
        (decimal.Decimal("1.10"), "1.10"),
        (uuid.UUID(int=7), "00000000-0000-0000-0000-000000000007"),
        (Color.RED, "red"),
        (Point(1, 2), {"x": 1, "y": 2}),
        ({3}, [3]),
        (frozenset({"a"}), ["a"]),
        ((1, "two"), [1, "two"]),
        ({1: "int key"}, {"1": "int key"}),
        ({"ok": True, "n": None}, {"n": None, "ok": True}),
    ],
)
def test_values_are_encoded_the_way_pydantic_encodes_them(value: object, expected: object) -> None:
    assert json.loads(result_text(value)) == expected


def test_plain_values_keep_their_canonical_spelling() -> None:
    assert result_text({"b": 1, "a": [1.5, "x"]}) == '{"a":[1.5,"x"],"b":1}'
    assert result_text("as is") == "as is"


def test_nan_still_reaches_the_model() -> None:
    assert result_text({"x": float("nan")}) == '{"x":NaN}'


def test_lone_surrogates_are_replaced_and_noted_first() -> None:
    text = valid_text("ok \udc80 and \ud800")
    assert text.startswith("[threads replaced 2 invalid character(s)")
    assert text.endswith("ok \ufffd and \ufffd")
    text.encode("utf-8")
    assert valid_text("fine \ufffd") == "fine \ufffd"  # a real U+FFFD is not counted


class Hostile:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


class HostileError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str either")


@pytest.mark.parametrize(
    "junk",
    [object(), Hostile(), b"\xff\xfe", {"self": []}, [1, object()], iter([1])],
    ids=["object", "hostile", "bad-bytes", "cycle", "nested-object", "iterator"],
)
def test_junk_becomes_a_text_that_says_so(junk: object) -> None:
    if isinstance(junk, dict):
        junk["self"].append(junk)  # a cycle
    text = result_text(junk)
    assert "cannot encode" in text or text.startswith("[")
    text.encode("utf-8")


def test_an_exception_whose_str_raises_is_still_described() -> None:
    assert describe_exception(HostileError()) == "HostileError: (its message could not be read)"


def results(events: list[Event]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "tool_result"]


@pytest.mark.parametrize("effect", ["unguarded", "idempotent", "read_only"])
async def test_a_tool_returning_junk_after_its_effect_is_a_success(
    store: Store, effect: str
) -> None:
    applied: list[str] = []

    async def send(args: Note, ctx: Any) -> object:
        applied.append(args.text)  # the effect happened
        return Hostile()

    options: dict[str, Any] = {"dedup_window_ms": 60_000} if effect == "idempotent" else {}
    send_tool = tool(
        name="send", description="Send.", input=Note, execute=send, effect=effect, **options
    )
    model = scripted_model([use(call("send", "c1", text="hi")), say("done")])
    bot = agent(name="t", model=model, tools=[send_tool])
    done = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(done, Completed)
    events = await done.thread.timeline()
    [result] = results(events)
    assert result["is_error"] is False
    assert result["origin"] == "executed"
    assert "cannot encode" in result["preview"]
    assert applied == ["hi"]
    # nothing runs again on a rerun
    again = await bot.run(None, store=store, thread=done.thread.id, principal=ALICE)
    assert isinstance(again, Completed)
    assert applied == ["hi"]


async def test_a_pydantic_receipt_is_the_result_not_an_error(store: Store) -> None:
    async def pay(args: Note, ctx: Any) -> Receipt:
        return Receipt(id="r1", amount=decimal.Decimal("5"), at=datetime.datetime(2026, 1, 1))

    pay_tool = tool(name="pay", description="Pay.", input=Note, execute=pay)
    model = scripted_model([use(call("pay", "c1", text="x")), say("done")])
    done = await agent(name="t", model=model, tools=[pay_tool]).run(
        "go", store=store, principal=ALICE
    )
    assert isinstance(done, Completed)
    [result] = results(await done.thread.timeline())
    assert result["is_error"] is False
    assert json.loads(result["preview"]) == {"amount": "5", "at": "2026-01-01T00:00:00", "id": "r1"}


@pytest.mark.parametrize("effect", ["read_only", "idempotent", "unguarded"])
async def test_a_lone_surrogate_never_raises_and_never_reruns_the_tool(
    store: Store, effect: str
) -> None:
    runs: list[int] = []

    async def read(args: Note, ctx: Any) -> str:
        runs.append(1)
        return "bad \udcff text"

    options: dict[str, Any] = {"dedup_window_ms": 60_000} if effect == "idempotent" else {}
    read_tool = tool(
        name="read", description="Read.", input=Note, execute=read, effect=effect, **options
    )
    model = scripted_model([use(call("read", "c1", text="x")), say("done")])
    bot = agent(name="t", model=model, tools=[read_tool])
    done = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(done, Completed)
    [result] = results(await done.thread.timeline())
    assert result["is_error"] is False
    assert result["preview"].startswith("[threads replaced 1 invalid character(s)")
    for _ in range(3):
        assert isinstance(
            await bot.run(None, store=store, thread=done.thread.id, principal=ALICE), Completed
        )
    assert runs == [1]


async def test_a_surrogate_in_an_exception_message_is_recorded(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # The tool's traceback is logged with the surrogate in it; kept out of the report's captured
    # log, which pytest-xdist's workers could not send to the controller.
    caplog.set_level(logging.CRITICAL + 1, logger="threads")

    async def boom(args: Note, ctx: Any) -> str:
        raise ValueError("broken \ud800")

    boom_tool = tool(name="boom", description="Boom.", input=Note, execute=boom)
    model = scripted_model([use(call("boom", "c1", text="x")), say("done")])
    done = await agent(name="t", model=model, tools=[boom_tool]).run(
        "go", store=store, principal=ALICE
    )
    assert isinstance(done, Completed)
    [result] = results(await done.thread.timeline())
    assert result["is_error"] is True
    assert "ValueError: broken \ufffd" in result["preview"]


async def test_tool_exceptions_are_logged_with_their_traceback(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom(args: Note, ctx: Any) -> str:
        raise RuntimeError("disk on fire")

    boom_tool = tool(name="boom", description="Boom.", input=Note, execute=boom, effect="read_only")
    model = scripted_model([use(call("boom", "c1", text="x")), say("done")])
    with caplog.at_level(logging.WARNING, logger="threads"):
        done = await agent(name="t", model=model, tools=[boom_tool]).run(
            "go", store=store, principal=ALICE
        )
    assert isinstance(done, Completed)
    [record] = [r for r in caplog.records if r.name == "threads"]
    assert record.levelno == logging.ERROR
    assert "boom" in record.getMessage()
    assert record.exc_info is not None
    assert "disk on fire" in caplog.text
    assert "Traceback" in caplog.text
    [result] = results(await done.thread.timeline())
    assert result["preview"] == "error: RuntimeError: disk on fire"  # and shown to the model


@pytest.mark.engines("sqlite")  # the CLI names a store by its directory; a test schema has no URL
async def test_the_store_verifies_after_junk_results(store: Store, tmp_path: Path) -> None:
    async def junk(args: Note, ctx: Any) -> object:
        return {"text": "\udc80" * 3, "obj": object()}

    junk_tool = tool(name="junk", description="Junk.", input=Note, execute=junk)
    model = scripted_model([use(call("junk", "c1", text="x")), say("done")])
    done = await agent(name="t", model=model, tools=[junk_tool]).run(
        "go", store=store, principal=ALICE
    )
    assert isinstance(done, Completed)
    verified = await asyncio.to_thread(cli_main, ["verify", "--store", str(tmp_path / "store")])
    assert verified == 0
