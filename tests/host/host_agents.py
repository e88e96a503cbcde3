"""Agents the host tests serve (``threads serve host_agents:agents``).

``greeter`` only talks; ``payer`` must be approved before ``wire_money`` runs; ``mailer``'s
``send_email`` times out after sending, so its run parks ``effect_unknown`` for a person;
``demo`` (with a sandbox that restores) owns imported logs to fork;
``counted`` allows one turn per thread (``Budget(max_turns=1)``);
``waiter`` blocks in a tool on a fake-service gate (``THREADS_HOST_PORT``) until the test
opens it, so a run can be caught while it is going.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from typing import Any

from pydantic import BaseModel

from threads import Budget, EffectUnknown, Permissions, agent, ask_user, tool
from threads.run.agent import Agent
from threads.testing.fake_service import ServiceClient
from threads.testing.scripted import call, say, scripted_model, use


class Email(BaseModel):
    to: str


class Amount(BaseModel):
    amount: int


class Gate(BaseModel):
    name: str


async def send_email(args: Email, ctx: Any) -> str:
    raise EffectUnknown("the mail server timed out after accepting the message")


async def wire_money(args: Amount, ctx: Any) -> str:
    return f"wired {args.amount}"


async def wait_gate(args: Gate, ctx: Any) -> str:
    """Wait on a daemon thread, so a host that cancels this run can still exit."""
    client = ServiceClient(int(os.environ["THREADS_HOST_PORT"]), "host")
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[None] = loop.create_future()

    def wait() -> None:
        client.wait_gate(args.name)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(lambda: opened.done() or opened.set_result(None))

    threading.Thread(target=wait, daemon=True).start()
    await opened
    return "the gate opened"


class Verdict(BaseModel):
    fixed: bool


class Restorer:
    """A sandbox that can restore a snapshot: what a fork over HTTP needs."""

    async def restore(self, snapshot: dict[str, Any]) -> str:
        return f"sbx-from-{snapshot['snapshot_id']}"


def agents() -> list[Agent]:
    return [
        # Owns the imported sample logs (agent_name "demo") the fork tests fork.
        agent(name="demo", model=scripted_model([say("forked")]), sandbox=Restorer()),
        agent(name="greeter", model=scripted_model([say(f"hello {n}") for n in range(1, 40)])),
        agent(
            name="payer",
            model=scripted_model([use(call("wire_money", amount=5)), say("paid")]),
            tools=[tool(name="wire_money", description="Wire money.", input=Amount,
                        execute=wire_money, effect="unguarded")],
            permissions=Permissions(ask=("wire_money",)),
        ),
        agent(
            name="mailer",
            model=scripted_model([use(call("send_email", to="c@example.com")), say("mailed")]),
            tools=[tool(name="send_email", description="Email.", input=Email,
                        execute=send_email)],
        ),
        agent(name="counted", model=scripted_model([say("once"), say("twice")]),
              budget=Budget(max_turns=1)),
        agent(
            name="asker", tools=[ask_user],
            model=scripted_model([use(call("ask_user", "q1", question="Which?",
                                           options=["red", "blue"])), say("blue it is")]),
        ),
        agent(name="judge", output=Verdict,
              model=scripted_model([use(call("final_output", fixed=True))])),
        agent(
            name="waiter",
            model=scripted_model([use(call("wait_gate", name="g")), say("waited")]),
            tools=[tool(name="wait_gate", description="Wait.", input=Gate, execute=wait_gate,
                        effect="read_only")],
        ),
    ]
