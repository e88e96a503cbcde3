"""Agents the console tests serve (``threads serve console_agents:agents``) and run from a
separate process (``console_run.py``) on the same store.

``clerk`` looks an invoice up (a read-only tool whose result holds markup and a
``javascript:`` link, which the console must show as text), then must be approved before
``wire_money`` runs; its model has a price, so calls have a cost. ``mailer``'s first
``send_email`` times out after sending (the thread parks ``effect_unknown``); a resend works.
``watcher`` waits at two fake-service gates (``THREADS_HOST_PORT``) the test opens, so a run
in another process can be watched while it goes. ``asker`` asks a question; ``greeter`` only
talks; ``triage`` hands the conversation off to ``helper``; ``demo`` (with a sandbox that
restores) owns imported logs to fork. The gate tool and the restoring sandbox are
``host_agents``'.
"""

from __future__ import annotations

from typing import Any

from host_agents import Gate, Restorer, wait_gate
from pydantic import BaseModel

from threads import EffectUnknown, Permissions, agent, ask_user, tool
from threads.models.protocol import Price
from threads.run.agent import Agent
from threads.testing.scripted import ScriptedModel, call, say, scripted_model, use

HOSTILE = (
    'INV-7: 120 EUR, open. <script>document.title="pwned"</script>'
    '<img src=x onerror="document.title=\'pwned\'"> pay at javascript:document.title="pwned"'
)


class Invoice(BaseModel):
    number: str


class Wire(BaseModel):
    amount: int
    to: str


class Mail(BaseModel):
    to: str
    subject: str


async def look_up_invoice(args: Invoice, ctx: Any) -> str:
    return HOSTILE


async def wire_money(args: Wire, ctx: Any) -> str:
    return f"wired {args.amount} EUR to {args.to}"


async def send_email(args: Mail, ctx: Any) -> str:
    if ctx.attempt == 1:
        raise EffectUnknown("the mail server timed out after accepting the message")
    return f"sent to {args.to}"


def agents() -> list[Agent]:
    helper = agent(name="helper", model=scripted_model([say("The helper took it from here.")]))
    clerk_model = ScriptedModel(
        [
            use(call("look_up_invoice", number="INV-7"), text="Let me look INV-7 up.",
                usage=(812, 41)),
            use(call("wire_money", amount=120, to="ACME GmbH"),
                text="INV-7 is open: I will pay it.", usage=(1304, 58)),
            say("Paid INV-7: 120 EUR to ACME GmbH.", usage=(1420, 22)),
        ],
        price=Price(input=3000, output=15000),
    )
    return [
        agent(
            name="clerk", model=clerk_model,
            instructions="Pay the invoices the user names, after looking them up.",
            tools=[
                tool(name="look_up_invoice", description="Look an invoice up.", input=Invoice,
                     execute=look_up_invoice, effect="read_only"),
                tool(name="wire_money", description="Wire money.", input=Wire,
                     execute=wire_money, effect="unguarded"),
            ],
            permissions=Permissions(ask=("wire_money",)),
        ),
        agent(
            name="mailer",
            model=scripted_model([use(call("send_email", to="c@example.com",
                                           subject="Your receipt")), say("Mailed the receipt.")]),
            tools=[tool(name="send_email", description="Email.", input=Mail, execute=send_email)],
        ),
        agent(
            name="watcher",
            model=scripted_model([use(call("wait_gate", name="first")),
                                  use(call("wait_gate", name="second")),
                                  say("Both gates opened.")]),
            tools=[tool(name="wait_gate", description="Wait.", input=Gate, execute=wait_gate,
                        effect="read_only")],
        ),
        agent(
            name="asker", tools=[ask_user],
            model=scripted_model([use(call("ask_user", question="Which colour?",
                                           options=["red", "blue"])), say("Blue it is.")]),
        ),
        agent(name="greeter", model=scripted_model([say(f"Hello {n}.") for n in range(1, 40)])),
        agent(name="triage", handoffs=[helper],
              model=scripted_model([use(call("handoff", agent="helper"))])),
        helper,
        agent(name="demo", model=scripted_model([say("forked")]), sandbox=Restorer()),
    ]
