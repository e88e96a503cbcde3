"""The demo's support agent: an idempotent ``charge_card``, a reconcilable ``refund`` and an
unguarded ``send_email``, played by a scripted model so the story needs no API key, or by a real
model (``threads demo --model``) that decides the calls and their order itself."""

from __future__ import annotations

import os
import signal

from pydantic import BaseModel

from threads import Agent, Found, NotFound, Reconcile, RunContext, agent, tool
from threads.demo.service import DemoService
from threads.models.protocol import Model
from threads.testing.scripted import call, say, scripted_model, use

CUSTOMER = "alice@example.com"
REQUEST = (
    "Order 42 was billed $20 instead of $15: refund the $20, charge $15, and email the customer."
)
KILL_ENV = "THREADS_DEMO_KILL_AFTER_EMAIL"


class Amount(BaseModel):
    amount_cents: int


class Email(BaseModel):
    to: str
    body: str


def build(service: DemoService, model: Model | None = None) -> Agent:
    """The agent, on ``model`` (default: the scripted model)."""
    async def charge(args: Amount, ctx: RunContext) -> str:
        return service.charge(args.amount_cents, ctx.effect_key)

    async def refund(args: Amount, ctx: RunContext) -> str:
        return service.refund(args.amount_cents, ctx.effect_key)

    async def find_refund(effect_key: str, ctx: RunContext) -> Found[str] | NotFound:
        receipt = service.find_refund(effect_key)
        return NotFound() if receipt is None else Found(receipt)

    async def send_email(args: Email, ctx: RunContext) -> str:
        sent = service.send_email(args.to, args.body, ctx.effect_key)
        if os.environ.get(KILL_ENV) == "1":
            # The demo's crash: the mail went out, and the worker dies before threads records it.
            os.kill(os.getpid(), signal.SIGKILL)
        return sent

    model = model or scripted_model(
        [
            use(call("refund", "call_refund", amount_cents=2000)),
            use(call("charge_card", "call_charge", amount_cents=1500)),
            use(
                call(
                    "send_email", "call_email", to=CUSTOMER, body="We refunded $20 and charged $15."
                )
            ),
            say("Done: refunded $20, charged $15, and emailed the customer."),
        ]
    )
    return agent(
        name="support",
        model=model,
        instructions=(
            "You are a billing support agent. Fix billing mistakes with your tools, then email"
            f" the customer ({CUSTOMER}) what you did. Amounts are in cents."
        ),
        tools=[
            tool(
                name="charge_card",
                description="Charge the customer's card.",
                input=Amount,
                execute=charge,
                effect="idempotent",
                dedup_window_ms=24 * 60 * 60 * 1000,
            ),
            tool(
                name="refund",
                description="Refund a charge.",
                input=Amount,
                execute=refund,
                effect="reconcilable",
                reconcile=Reconcile(lookup=find_refund, finality="final"),
            ),
            tool(
                name="send_email",
                description="Email the customer.",
                input=Email,
                execute=send_email,
            ),
        ],
    )
