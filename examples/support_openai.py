"""A support agent on the OpenAI adapter, talking to the bundled fake OpenAI server.

    python examples/support_openai.py

The fake (``threads.testing.fake_providers.OpenAIFake``) listens on 127.0.0.1 and speaks the
Responses API's wire format (SSE streaming included) through the official ``openai`` SDK, so this
is the code you would run against the real API: drop the fake, drop ``base_url`` and
``api_key``, and set ``OPENAI_API_KEY``. Needs the ``openai`` extra.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile

from threads import Completed, Price, RunContext, agent, sqlite, tool
from threads.openai import openai
from threads.testing.fake_providers import (
    OpenAIFake,
    ScriptedToolCall,
    ScriptedTurn,
    ScriptedUsage,
)

ORDERS = {"42": {"item": "kettle", "amount_cents": 3999, "state": "delivered"}}
REFUNDS: dict[str, int] = {}  # stands in for the payment provider, keyed by idempotency key


@tool(effect="read_only")
def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order by its id."""
    return ORDERS.get(order_id, {"error": f"no order {order_id}"})


@tool(effect="idempotent", dedup_window_ms=24 * 60 * 60 * 1000)
async def refund(order_id: str, amount_cents: int, ctx: RunContext) -> str:
    """Refund an order. The provider deduplicates on the idempotency key for 24 hours."""
    REFUNDS.setdefault(ctx.effect_key, amount_cents)  # a resend with the same key is a no-op
    return f"refunded {amount_cents} cents on order {order_id}"


def script(fake: OpenAIFake) -> None:
    """What the fake model answers: look the order up, refund it, then say so."""
    usage = ScriptedUsage(input_tokens=120, output_tokens=20)
    lookup = ScriptedToolCall("call_1", "lookup_order", ['{"order_id":"42"}'])
    pay = ScriptedToolCall("call_2", "refund", ['{"order_id":"42",', '"amount_cents":3999}'])
    fake.script(
        ScriptedTurn(tool_calls=[lookup], usage=usage),
        ScriptedTurn(tool_calls=[pay], usage=usage),
        ScriptedTurn(text_chunks=["Your kettle ", "is refunded: 39.99."], usage=usage),
    )


async def main(store_dir: str) -> int:
    async with OpenAIFake() as fake:
        script(fake)
        model = openai(
            "gpt-4.1",
            base_url=fake.base_url,
            api_key="not-a-real-key",
            context_window=1_047_576,
            max_output_tokens=32_768,
            price=Price(input=2000, output=8000),  # nano-units per token
        )
        bot = agent(
            name="support",
            model=model,
            instructions="You help customers with their orders.",
            tools=[lookup_order, refund],
        )
        store = sqlite(store_dir)
        try:
            result = await bot.run("My kettle from order 42 broke.", store=store)
            if not isinstance(result, Completed):
                print(f"the run ended {result.status}", file=sys.stderr)
                return 1
            print(result.output)
            cost = await result.thread.cost()
            assert cost is not None  # the model has a price
            print(f"refunds applied: {len(REFUNDS)}; model requests: {len(fake.requests)};"
                  f" cost: {cost.known_nanos} nano-{cost.currency}")
            return 0
        finally:
            await store.close()
            await model.aclose()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        sys.exit(asyncio.run(main(directory)))
