"""``GET .../runs/{run_id}/events``: one run's committed events as Server-Sent Events.

Framing is the reference host's: ``id: <seq>`` and ``data: <JCS JSON>`` per committed event
(``{"kind":"event","event":...}``), then one ``{"kind":"result","run_id","result"}`` without an
id, and the stream ends. A run's events go from its ``user_input`` through the
``turn_completed`` that closes its turn (or, while it goes on, up to the next ``user_input``).
Invariant: events are sent in seq order, each once, starting after the client's resume point,
so a reconnect with ``Last-Event-ID`` has no gap and no duplicate. Subscribing never starts,
resumes or appends anything.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from threads.errors import ThreadsError
from threads.host.hub import IDLE_S, POLL_S
from threads.host.runs import Runs
from threads.log.canonical import canonical
from threads.log.json_types import JsonObject
from threads.log.lines import Event
from threads.log.vocabulary import data_of
from threads.run import failed_code
from threads.store.protocol import BranchInfo


@dataclass(frozen=True, slots=True)
class RunRef:
    branch: BranchInfo
    run_seq: int
    run_id: str


async def find_run(runs: Runs, thread_id: str, tenant: str, run_id: str) -> RunRef | None:
    """The branch of ``thread_id`` (this tenant's) whose own segment has ``run_id``'s input."""
    store = runs.store
    branches = await store.list_branches(thread_id)
    for branch in branches:
        if branch.tenant_id != tenant or branch.state == "forking":
            continue
        chain = await store.read_chain(branch.branch_id)
        for event in chain.segments[-1].events:
            if event.event_id == run_id and event.type == "user_input":
                return RunRef(branch, event.seq, run_id)
    return None


def frame(payload: JsonObject, seq: int | None = None) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return head.encode() + b"data: " + canonical(payload) + b"\n\n"


def event_frame(event: Event) -> bytes:
    return frame({"kind": "event", "event": json.loads(event.line)}, event.seq)


def outcome(run_events: list[Event], runs: Runs, branch_id: str) -> JsonObject | None:
    """The run's result as the log tells it, or None while it is still going. Every park of
    the run's turn is in its own events: a parked turn takes no new input."""
    closing = next((e for e in run_events if e.type == "turn_completed"), None)
    if closing is not None:
        return _ended(closing, run_events)
    held = runs.holds(branch_id)
    parks: dict[tuple[str, str], Event] = {}
    for event in run_events:
        if event.type == "parked":
            address = data_of(event, "parked")["address"]
            parks[(address["kind"], address["id"])] = event
        elif event.type == "resumed":
            address = data_of(event, "resumed")["address"]
            parks.pop((address["kind"], address["id"]), None)
    if parks and not held:
        last = max(parks.values(), key=lambda e: e.seq)
        return {
            "status": "parked",
            "reason": data_of(last, "parked")["reason"],
            "pending": [{"kind": kind, "id": ident} for kind, ident in parks],
        }
    refused = runs.refused.get(branch_id)
    if refused is not None and not held:
        return {"status": "failed", "error": {"code": refused.code, "message": refused.message}}
    return None


def _ended(closing: Event, run_events: list[Event]) -> JsonObject:
    reason = data_of(closing, "turn_completed")["reason"]
    if reason in ("end_turn", "max_output"):
        accepted = next((e for e in reversed(run_events) if e.type == "output_validated"
                         and data_of(e, "output_validated")["outcome"] == "accepted"), None)
        if accepted is not None:  # structured output: the validated value
            return {"status": "completed", "output": data_of(accepted, "output_validated")["value"]}
        response = next((e for e in reversed(run_events) if e.type == "model_response"), None)
        content = data_of(response, "model_response")["content"] if response is not None else []
        text = "".join(p["text"] for p in content if p["type"] == "text")
        return {"status": "completed", "output": text}
    if reason == "cancelled":
        return {"status": "cancelled"}
    if reason == "handoff":
        handoff = next((e for e in reversed(run_events) if e.type == "handoff"), None)
        to_thread = None if handoff is None else data_of(handoff, "handoff")["to_thread_id"]
        return {"status": "handed_off", "to_thread_id": to_thread}
    if reason == "budget_exhausted":
        exceeded = next((e for e in reversed(run_events) if e.type == "budget_exceeded"), None)
        return {"status": "budget_exhausted", "budget": exceeded.data if exceeded else {}}
    # As the library reads the ending (``threads.run.failed_code``); an ending that is no
    # failure there (``interrupted``, ...) reads model_error here, as the reference's host has it
    code = failed_code(data_of(closing, "turn_completed")) or "model_error"
    return {"status": "failed", "error": {"code": code, "message": f"the turn ended: {reason}"}}


def run_slice(candidates: list[Event], run_seq: int, into: list[Event]) -> bool:
    """Add the run's events among ``candidates`` (in seq order) to ``into``: its input through
    its turn's end, or up to the next input. True once the slice is complete."""
    for event in candidates:
        if event.seq < run_seq or (into and event.seq <= into[-1].seq):
            continue
        if event.seq > run_seq and event.type == "user_input":
            return True
        into.append(event)
        if event.type == "turn_completed":
            return True
    return False


async def subscribe(runs: Runs, ref: RunRef, after_seq: int) -> AsyncIterator[bytes]:
    store, hub = runs.store, runs.hub
    branch_id = ref.branch.branch_id
    sent, head = after_seq, -1
    events: list[Event] = []
    complete = False
    while True:
        seen = hub.version(branch_id)
        last = events[-1].seq if events else ref.run_seq - 1
        fresh = None if complete else hub.since(branch_id, last)
        try:
            if fresh is not None:
                complete = run_slice(fresh, ref.run_seq, events)
            elif not complete:
                info = await store.get_branch(branch_id)
                if info.head_seq != head:
                    head = info.head_seq
                    chain = await store.read_chain(branch_id)
                    complete = run_slice(chain.segments[-1].events, ref.run_seq, events)
        except ThreadsError:
            return  # the branch became unreadable: close without a result
        for event in events:
            if event.seq > sent:
                sent = event.seq
                yield event_frame(event)
        result = outcome(events, runs, branch_id)
        if result is not None:
            yield frame({"kind": "result", "result": result, "run_id": ref.run_id})
            return
        if complete or runs.stopping:
            return  # the run's slice ended without an outcome we can tell (a later input)
        # Our own run wakes us on every append (and when it ends); a branch written
        # elsewhere is polled.
        await hub.wait(branch_id, seen, IDLE_S if runs.holds(branch_id) else POLL_S)
