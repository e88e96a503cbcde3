"""An artifact the log needs and the store lacks (here: the stored result of a committed effect,
which recovery must materialize) ends the run with a coded ``Failed(artifact_missing)``: nothing
raises out of ``run()``, nothing is recorded, and the effect is not run again."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from threads import Failed, Principal, agent, tool
from threads.log.render import prefix_digest, prefix_line
from threads.run.writer import BranchWriter
from threads.store.protocol import Store
from threads.testing import say, scripted_model

ALICE = Principal("api", "acme", "alice")


class Note(BaseModel):
    to: str


async def test_a_committed_result_whose_artifact_is_gone(store: Store) -> None:
    sent: list[str] = []

    async def send(args: Note, ctx: Any) -> str:
        sent.append(args.to)
        return "sent"

    bot = agent(name="t", model=scripted_model([say("hi"), say("never")]),
                tools=[tool(name="send", description="Send.", input=Note, execute=send)])
    first = await bot.run("hi", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    lease = await store.acquire_lease(branch.branch_id, "the-writer-that-died", 60_000)
    writer = BranchWriter(store, lease, (await store.read_chain(branch.branch_id)).fold(0))
    host, user = {"kind": "host"}, {"kind": "user", "principal": ALICE.to_wire()}
    await writer.append([("user_input", {"source": "api", "text": "send it"}, user)])
    request_ref = {"bytes": 1, "media_type": "application/x-ndjson", "sha256": "0" * 64}
    prefix = prefix_digest(prefix_line(writer.fold.thread_started))
    [request] = await writer.append([("model_request", {
        "attempt": 1, "declared_prefix": prefix, "request_ref": request_ref}, host)])
    part = {"type": "tool_use", "call_id": "c1", "name": "send", "input": {"to": "bob"}}
    gone = {"bytes": 4, "media_type": "text/plain", "sha256": "ab" * 32}
    await writer.append([
        ("model_response", {"completeness": "complete", "content": [part],
                            "request_event_id": request.event_id, "stop_reason": "tool_use",
                            "usage": {"input_tokens": 1, "output_tokens": 1}}, {"kind": "model"}),
        ("tool_call", {"call_id": "c1", "input": {"to": "bob"}, "name": "send",
                       "request_event_id": request.event_id}, host),
        ("permission_decision", {"call_id": "c1", "decision": "allow", "source": "default"}, host),
        ("effect_begin", {"attempt": 1, "call_id": "c1"}, host),
        ("effect_commit", {"call_id": "c1", "result_ref": gone}, host),
    ])
    await store.release_lease(writer.lease)
    head = (await store.root_branch(first.thread.id)).head_seq
    result = await bot.run(None, store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "artifact_missing"
    assert sent == []  # committed: never run again
    assert (await store.root_branch(first.thread.id)).head_seq == head  # nothing recorded
