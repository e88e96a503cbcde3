"""The tree host drill's agents (``threads serve tree_agents:agents``): a lead that spawns a
clerk, which charges (idempotent, after an approval) and emails (unguarded) at the fake
service (``THREADS_HOST_PORT``). With ``THREADS_TREE_GATE`` set, the charge waits at that
service gate, ``before`` or ``after`` (``THREADS_TREE_AT``) the service applied it, so the
drill can kill the host at that boundary.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel

from threads import Permissions, agent, tool
from threads.run.agent import Agent
from threads.testing.fake_service import ServiceClient
from threads.testing.scripted import call, say, scripted_model, use

DAY_MS = 24 * 60 * 60 * 1000


class Amount(BaseModel):
    amount: int


class Email(BaseModel):
    to: str


def agents() -> list[Agent]:
    client = ServiceClient(int(os.environ["THREADS_HOST_PORT"]), "host")
    gate = os.environ.get("THREADS_TREE_GATE")
    at = os.environ.get("THREADS_TREE_AT")

    async def hold(when: str) -> None:
        if gate and at == when:
            await asyncio.to_thread(client.wait_gate, gate)

    async def charge(args: Amount, ctx: Any) -> str:
        await hold("before")
        value = await asyncio.to_thread(client.apply, "charge", ctx.effect_key,
                                        f"charged {args.amount}", dedup=True)
        await hold("after")
        return value

    async def send_email(args: Email, ctx: Any) -> str:
        return await asyncio.to_thread(client.apply, "email", ctx.effect_key,
                                       f"emailed {args.to}", dedup=False)

    tools = [
        tool(name="charge_card", description="Charge the card.", input=Amount, execute=charge,
             effect="idempotent", dedup_window_ms=DAY_MS),
        tool(name="send_email", description="Email the customer.", input=Email,
             execute=send_email),
    ]
    clerk = agent(name="clerk", tools=tools, permissions=Permissions(ask=["charge_card"]),
                  model=scripted_model([use(call("charge_card", amount=5)),
                                        use(call("send_email", to="c@example.com")),
                                        say("charged and emailed")]))
    lead = agent(name="lead", tools=tools, subagents=[clerk],
                 model=scripted_model([use(call("spawn_agent", agent="clerk",
                                                prompt="charge 5 and email c")),
                                       say("All done.")]))
    return [lead, clerk]
