"""Compaction drill worker: ``python compaction_worker.py run SPEC`` runs one turn of a long chat
on a real SQLite store in its own process and prints its outcome as a JSON line.

The agent talks to ``chat_model`` (its replies are a function of the request, so a rerun in a
fresh process gets the same answers) under a tight ``ContextPolicy``, so its threshold is passed
within a few turns. SPEC is ``worker.py``'s (``store``, ``thread``, ``input``, ``kill``,
``clock_file``) plus ``compact`` (the operator asks for a compaction, in this process and
through the same killing store, before the run) and ``threshold`` (false: the agent pins no
context policy, so only the operator's request compacts) and ``tools`` (the model looks each
message up with a read_only tool whose results an extension redacts, and old results are
cleared). Kill points are ``worker.py``'s, and may add ``"purpose": "compaction"`` (only a
summarizer's ``model_request``), ``"side": true`` (only the append holding a summarizer's
reply) or ``"reason"`` (only a ``context_edited`` with that reason).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from worker import STARTER, KillingStore, OffsetClock, print_outcome

from threads import ContextPolicy, Extension, HookDecision, agent, open_thread, tool
from threads.run.hooks import ToolResultView
from threads.testing.chat_model import ChatModel

POLICY = ContextPolicy(reserve_tokens=0, compact_permille=500, keep_tail_tokens=100)
TOOL_POLICY = ContextPolicy(reserve_tokens=0, compact_permille=500, keep_tail_tokens=100,
                            clear_permille=250, keep_recent=1)
WINDOW = 1200
SECRET = "secret-42"


class Query(BaseModel):
    query: str


def _lookup(args: Query, ctx: object) -> str:
    return f"{SECRET} found for {args.query[:40]}"


async def _redact(view: ToolResultView) -> HookDecision:
    return HookDecision("redact", "secret", ((0, len(SECRET)),))


LOOKUP = tool(name="lookup", description="Look it up.", input=Query, execute=_lookup,
              effect="read_only")
GUARD = Extension(name="guard", before_tool_result=_redact)


class CompactionKillingStore(KillingStore):
    def __init__(self, path: str, *, clock: Any, kill: dict[str, Any] | None) -> None:
        super().__init__(path, clock=clock, kill=kill)
        self.side_ids: set[str] = set()

    def _should_die(self, events: Any) -> bool:
        kill = self.kill
        for event in events:
            if event.type == "model_request" and event.data.get("purpose") == "compaction":
                self.side_ids.add(event.event_id)
        if "reason" in kill and not any(
            e.type == kill.get("type") and e.data.get("reason") == kill["reason"] for e in events
        ):
            return False
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
    tools = bool(spec.get("tools"))
    policy = (TOOL_POLICY if tools else POLICY) if spec.get("threshold", True) else None
    bot = agent(
        name="chat", model=ChatModel(context_window=WINDOW, calls="lookup" if tools else None),
        context=policy, tools=[LOOKUP] if tools else [], extensions=[GUARD] if tools else [],
    )
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
