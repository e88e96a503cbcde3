"""The host crash drill's agent (``threads serve drill_agents:agents``): four effectful tools
that apply to the fake service (``THREADS_HOST_PORT``), one per effect class.

Tools call the service off the event loop and take a few milliseconds each, so a SIGKILL at
a random time lands inside runs, between any two of their durable steps.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel

from threads import Found, NotFound, Reconcile, agent, tool
from threads.run.agent import Agent
from threads.testing.fake_service import ServiceClient
from threads.testing.scripted import call, say, scripted_model, use

DAY_MS = 24 * 60 * 60 * 1000
WORK_S = 0.05  # how long each tool works, so kills land mid-run


class Account(BaseModel):
    account: str


class Amount(BaseModel):
    amount: int


class Email(BaseModel):
    to: str


def agents() -> list[Agent]:
    client = ServiceClient(int(os.environ["THREADS_HOST_PORT"]), "host")

    async def apply(kind: str, key: str, value: str, *, dedup: bool) -> str:
        await asyncio.sleep(WORK_S)
        return await asyncio.to_thread(client.apply, kind, key, value, dedup=dedup)

    async def look_up(args: Account, ctx: Any) -> str:
        await asyncio.sleep(WORK_S)
        return f"account {args.account} is open"

    async def charge(args: Amount, ctx: Any) -> str:
        return await apply("charge", ctx.effect_key, f"charged {args.amount}", dedup=True)

    async def refund(args: Amount, ctx: Any) -> str:
        return await apply("refund", ctx.effect_key, f"refunded {args.amount}", dedup=False)

    async def find_refund(key: str, ctx: Any) -> Found[str] | NotFound:
        value = await asyncio.to_thread(client.lookup, key)
        return NotFound() if value is None else Found(value)

    async def send_email(args: Email, ctx: Any) -> str:
        return await apply("email", ctx.effect_key, f"emailed {args.to}", dedup=False)

    script = [
        use(call("look_up", account="a1")),
        use(call("charge_card", amount=5)),
        use(call("refund", amount=2)),
        use(call("send_email", to="c@example.com")),
        say("all done"),
    ]
    return [agent(
        name="drill",
        model=scripted_model(script),
        instructions="Help the customer.",
        tools=[
            tool(name="look_up", description="Look up an account.", input=Account,
                 execute=look_up, effect="read_only"),
            tool(name="charge_card", description="Charge the card.", input=Amount,
                 execute=charge, effect="idempotent", dedup_window_ms=DAY_MS),
            tool(name="refund", description="Refund a charge.", input=Amount, execute=refund,
                 effect="reconcilable", reconcile=Reconcile(find_refund, finality="final")),
            tool(name="send_email", description="Email the customer.", input=Email,
                 execute=send_email),
        ],
    )]
