"""The public API is typed for its users: ``mypy --strict`` on a user's program knows what a run's
output is, what ``ctx.deps`` is, checks a tool's ``execute`` against its input model, and sees
``Agent.model.aclose``. A program that gets any of these wrong is refused at the line it does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

PROGRAM = '''\
import asyncio
from dataclasses import dataclass

from pydantic import BaseModel

from threads import Completed, RunContext, agent, sqlite, tool
from threads.testing import say, scripted_model


class Invoice(BaseModel):
    total: int


class Lookup(BaseModel):
    sku: str


@dataclass
class Shop:
    prices: dict[str, int]


async def price(args: Lookup, ctx: RunContext[Shop]) -> int:
    return ctx.deps.prices[args.sku]


price_tool = tool(name="price", description="A price.", input=Lookup, execute=price)
reveal_type(price_tool)
typed = agent(name="a", model=scripted_model([say("x")]), tools=[price_tool], output=Invoice)
reveal_type(typed)
plain = agent(name="b", model=scripted_model([say("x")]))
reveal_type(plain)
pinned = agent(name="c", model=scripted_model([say("x")]), deps_type=Shop)
reveal_type(pinned)


async def main() -> None:
    store = sqlite(".threads")
    done = await typed.run("go", store=store, deps=Shop({"a": 1}))
    if isinstance(done, Completed):
        reveal_type(done.output)
        total: int = done.output.total
    said = await plain.run("hi", store=store)
    if isinstance(said, Completed):
        reveal_type(said.output)
    await typed.model.aclose()


asyncio.run(main())
'''

# Each line below is a mistake mypy must refuse (line numbers counted in the whole program).
MISTAKES = '''\


async def wrong() -> None:
    await typed.run("go", deps="not a shop")
    tool(name="price", description="A price.", input=Invoice, execute=price)
    text: str = (await typed.run("go")).output
'''


def _mypy(tmp_path: Path, source: str) -> tuple[int, list[str]]:
    from mypy import api

    program = tmp_path / "user_program.py"
    program.write_text(source, encoding="utf-8")
    out, _, status = api.run([
        "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
        "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
        str(program),
    ])
    return status, out.splitlines()


@pytest.mark.timeout(300)
def test_mypy_knows_the_output_the_deps_and_the_tools_of_a_user_s_agent(tmp_path: Path) -> None:
    status, lines = _mypy(tmp_path, PROGRAM)
    errors = [line for line in lines if ": error:" in line]
    assert errors == [], "\n".join(lines)
    revealed = [line.split("Revealed type is ")[1] for line in lines if "Revealed type" in line]
    assert revealed == [
        '"threads.tools.tool.Tool[user_program.Shop]"',
        '"threads.run.agent.Agent[user_program.Shop, user_program.Invoice]"',
        '"threads.run.agent.Agent[Any, str]"',
        '"threads.run.agent.Agent[user_program.Shop, str]"',
        '"user_program.Invoice"',
        '"str"',
    ]
    assert status == 0


@pytest.mark.timeout(300)
def test_mypy_refuses_wrong_deps_a_mismatched_execute_and_a_misread_output(
    tmp_path: Path,
) -> None:
    status, lines = _mypy(tmp_path, PROGRAM + MISTAKES)
    first = PROGRAM.count("\n") + 1
    errors = [line for line in lines if ": error:" in line]
    where = {int(line.split(":")[1]) - first for line in errors}
    # deps of the wrong type; execute taking another input model; a Completed[Invoice] read as
    # text (through the union: the other results have no .output either)
    assert {3, 4, 5} <= where, "\n".join(lines)
    assert where <= {3, 4, 5}, "\n".join(lines)
    assert status == 1
