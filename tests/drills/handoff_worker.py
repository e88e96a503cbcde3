"""Handoff drill worker: ``python handoff_worker.py run SPEC`` runs the source agent ``triage``
on a real SQLite store in its own process and prints its outcome as a JSON line.

``triage`` looks an account up, then in one reply hands off to ``drill`` (``worker.py``'s agent,
scripted to charge a card through the fake service and answer) and asks for an email after the
handoff call, which must never be sent. SPEC is ``worker.py``'s (``store``, ``port``,
``thread``, ``input``, ``kill``, ``clock_file``); kill points are ``worker.py``'s, plus
``{"created_target": true}``: die right after the handoff target's branch is created.
"""

from __future__ import annotations

from typing import Any

from worker import STARTER, KillingStore, OffsetClock, build_agent, die, print_outcome

from threads import Failed, HandedOff, agent
from threads.run.agent import Agent
from threads.testing.scripted import call, scripted_model, use

TRIAGE_SCRIPT = [
    use(call("look_up", "c1", account="a1")),
    use(call("handoff", "h1", agent="drill"), call("send_email", "c3", to="c@example.com"),
        text="Passing you to the drill team."),
]


class HandoffKillingStore(KillingStore):
    async def create_branch(self, header: Any, **kwargs: Any) -> None:
        await super().create_branch(header, **kwargs)
        events = kwargs.get("events") or ()
        parent = events[0].data.get("parent") if events else None
        if self.kill.get("created_target") and parent is not None:
            die()


def triage(spec: dict[str, Any]) -> Agent:
    target = build_agent({**spec, "profile": "one_call", "tool": "charge_card"})
    tools = [t for t in target.tools if t.name in ("look_up", "send_email")]
    return agent(name="triage", model=scripted_model(TRIAGE_SCRIPT), tools=tools,
                 instructions="Route the customer.", handoffs=[target])


async def run_once(spec: dict[str, Any]) -> dict[str, Any]:
    clock = OffsetClock(spec["clock_file"]) if spec.get("clock_file") else None
    store = HandoffKillingStore(spec["store"], clock=clock, kill=spec.get("kill"))
    try:
        result = await triage(spec).run(spec.get("input"), thread=spec.get("thread"),
                                        store=store, principal=STARTER)
        out: dict[str, Any] = {"status": result.status, "thread": result.thread.id}
        if isinstance(result, HandedOff):
            out["to_thread"] = result.to_thread.id
            out["target"] = None if result.target is None else result.target.status
        if isinstance(result, Failed):
            out["error"] = result.error.code
        return out
    finally:
        await store.close()


if __name__ == "__main__":
    print_outcome(run_once)
