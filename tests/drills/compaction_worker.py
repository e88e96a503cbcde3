"""Compaction drill worker: ``python compaction_worker.py run SPEC`` runs one turn of a long chat
on a real SQLite store in its own process and prints its outcome as a JSON line.

The agent talks to ``chat_model`` (its replies are a function of the request, so a rerun in a
fresh process gets the same answers) under a tight ``ContextPolicy``, so its threshold is passed
within a few turns. SPEC is ``worker.py``'s (``store``, ``thread``, ``input``, ``kill``,
``clock_file``) plus ``compact`` (the operator asks for a compaction, in this process and
through the same killing store, before the run) and ``threshold`` (false: the agent pins no
context policy, so only the operator's request compacts). Kill points are ``worker.py``'s,
and may add ``"purpose": "compaction"`` (only a summarizer's ``model_request``) or
``"side": true`` (only the append holding a summarizer's reply).
"""

from __future__ import annotations

from typing import Any

from worker import STARTER, KillingStore, OffsetClock, print_outcome

from threads import ContextPolicy, agent, open_thread
from threads.testing.chat_model import ChatModel

POLICY = ContextPolicy(reserve_tokens=0, compact_permille=500, keep_tail_tokens=100)
WINDOW = 1200


class CompactionKillingStore(KillingStore):
    def __init__(self, path: str, *, clock: Any, kill: dict[str, Any] | None) -> None:
        super().__init__(path, clock=clock, kill=kill)
        self.side_ids: set[str] = set()

    def _should_die(self, events: Any) -> bool:
        kill = self.kill
        for event in events:
            if event.type == "model_request" and event.data.get("purpose") == "compaction":
                self.side_ids.add(event.event_id)
        if "purpose" in kill and not any(
            e.type == kill.get("type") and e.data.get("purpose") == kill["purpose"]
            for e in events
        ):
            return False
        if kill.get("side") and not any(
            e.type == "model_response" and e.data["request_event_id"] in self.side_ids
            for e in events
        ):
            return False
        return super()._should_die(events)


async def run_once(spec: dict[str, Any]) -> dict[str, Any]:
    clock = OffsetClock(spec["clock_file"]) if spec.get("clock_file") else None
    store = CompactionKillingStore(spec["store"], clock=clock, kill=spec.get("kill"))
    policy = POLICY if spec.get("threshold", True) else None
    bot = agent(name="chat", model=ChatModel(context_window=WINDOW), context=policy)
    try:
        if spec.get("compact"):
            thread = await open_thread(store, spec["thread"], principal=STARTER)
            await thread.compact(STARTER, instructions="Keep the message numbers.")
        result = await bot.run(spec.get("input"), thread=spec.get("thread"), store=store,
                               principal=STARTER)
        out: dict[str, Any] = {"status": result.status, "thread": result.thread.id}
        if result.status == "failed":
            out["error"] = result.error.code  # type: ignore[attr-defined]
        return out
    finally:
        await store.close()


if __name__ == "__main__":
    print_outcome(run_once)
