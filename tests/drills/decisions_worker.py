"""Drill worker for the loop's decisions on resume: ``python decisions_worker.py run SPEC`` does
one step on a real SQLite store in its own process and prints its outcome as a JSON line.

SPEC is ``worker.py``'s (``store``, ``thread``, ``input``, ``kill``, ``clock_file``) plus
``scenario`` and ``step``:

- ``switch``: an agent on a primary model whose first reply is an overload, with a turn-scoped
  fallback after one (``fallback_after=1``). Step ``run`` runs it; step ``deny`` stands in for
  a writer that ran a ``before_model_switch`` hook: it opens the next turn (``user_input``) and
  records the hook's ``deny`` of the revert, keyed to that input, in a second append (the kill
  point ``{"type": "hook_decision", "nth": 1}`` dies right after it).
- ``foreign``: step ``prepare`` records, as another writer, a turn whose reply carries another
  provider's signed reasoning; a ``run`` then must refuse ``continuation_unsupported``.
- ``content``: step ``prepare`` records, as another writer, an open turn whose input holds an
  image the text-only model can't take; a ``run`` then must refuse ``content_unsupported``.

A ``run`` prints ``status``, ``error`` (a failure's code), ``output`` and ``sent`` (the requests
each model of this process was sent). Kill points are ``worker.py``'s.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from worker import STARTER, KillingStore, OffsetClock

from threads import RetryPolicy, agent
from threads.log.render import prefix_digest, prefix_line
from threads.run.agent import Agent
from threads.run.writer import BranchWriter
from threads.store.protocol import Store
from threads.testing.scripted import ScriptedModel, overloaded, say, scripted_model

USER = {"kind": "user", "principal": STARTER.to_wire()}
HOST = {"kind": "host"}
WRITER = "another-writer"
TTL_MS = 30_000  # the stand-in writer's lease: the parent moves the clock past it after a kill


def models(scenario: str) -> list[ScriptedModel]:
    if scenario == "switch":
        return [scripted_model([overloaded(), say("from the primary")]),
                scripted_model([say("from the fallback")] * 3, name="scripted-small")]
    if scenario == "foreign":
        return [scripted_model([say("hello"), say("never sent")])]
    return [scripted_model([say("hello"), say("never sent")])]  # content: text input only


def build(scenario: str, used: list[ScriptedModel]) -> Agent:
    if scenario == "switch":
        primary, small = used
        return agent(name="switch", model=primary, fallback=[small],
                     retry=RetryPolicy(fallback_after=1))
    return agent(name=scenario, model=used[0])


async def other_writer(store: Store, thread_id: str) -> BranchWriter:
    branch = await store.root_branch(thread_id)
    lease = await store.acquire_lease(branch.branch_id, WRITER, TTL_MS)
    chain = await store.read_chain(branch.branch_id)
    return BranchWriter(store, lease, chain.fold(store.clock.now_ms()))


async def deny_the_revert(store: Store, thread_id: str, text: str) -> None:
    writer = await other_writer(store, thread_id)
    [opened] = await writer.append([("user_input", {"source": "api", "text": text}, USER)])
    decision = {"decision": "deny", "extension": "keep_model", "hook": "before_model_switch",
                "input_event_id": opened.event_id, "reason": "stay on the fallback"}
    await writer.append([("hook_decision", decision, HOST)])
    await store.release_lease(writer.lease)


async def foreign_reasoning_turn(store: Store, thread_id: str) -> None:
    writer = await other_writer(store, thread_id)
    await writer.append([("user_input", {"source": "api", "text": "think"}, USER)])
    prefix = prefix_digest(prefix_line(writer.fold.thread_started))
    ref = {"bytes": 1, "media_type": "application/x-ndjson", "sha256": "0" * 64}
    [request] = await writer.append([("model_request", {
        "attempt": 1, "declared_prefix": prefix, "request_ref": ref}, HOST)])
    signed = await store.put_artifact(b'{"signature":"abc"}', "application/json")
    reasoning = {"type": "reasoning", "provider": "other", "model": "other-1",
                 "format": "other_thinking", "ref": signed}
    reply = {"completeness": "complete",
             "content": [reasoning, {"type": "text", "text": "Thought about it."}],
             "request_event_id": request.event_id, "stop_reason": "end_turn",
             "usage": {"input_tokens": 1, "output_tokens": 1}}
    await writer.append([("model_response", reply, {"kind": "model"}),
                         ("turn_completed", {"reason": "end_turn"}, HOST)])
    await store.release_lease(writer.lease)


async def image_turn(store: Store, thread_id: str) -> None:
    writer = await other_writer(store, thread_id)
    image = await store.put_artifact(b"\x89PNG not really an image", "image/png")
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image_ref", "ref": image, "width": 10, "height": 10}]
    await writer.append([("user_input", {"content": content, "source": "api"}, USER)])
    await store.release_lease(writer.lease)


async def run_once(spec: dict[str, Any]) -> dict[str, Any]:
    clock = OffsetClock(spec["clock_file"]) if spec.get("clock_file") else None
    store = KillingStore(spec["store"], clock=clock, kill=spec.get("kill"))
    scenario, step = spec["scenario"], spec.get("step", "run")
    try:
        if step == "deny":
            await deny_the_revert(store, spec["thread"], spec["input"])
            return {"status": "recorded"}
        if step == "prepare":
            prepare = foreign_reasoning_turn if scenario == "foreign" else image_turn
            await prepare(store, spec["thread"])
            return {"status": "recorded"}
        used = models(scenario)
        result = await build(scenario, used).run(
            spec.get("input"), thread=spec.get("thread"), store=store, principal=STARTER)
        out: dict[str, Any] = {"status": result.status, "thread": result.thread.id,
                               "sent": [len(model.requests) for model in used]}
        if result.status == "failed":
            out["error"] = result.error.code  # type: ignore[attr-defined]
        if result.status == "completed":
            out["output"] = result.output  # type: ignore[attr-defined]
        return out
    finally:
        await store.close()


def main() -> None:
    spec = json.loads(sys.argv[2])
    print(json.dumps(asyncio.run(run_once(spec))), flush=True)


if __name__ == "__main__":
    main()
