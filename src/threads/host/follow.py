"""``GET /v1/threads/{id}/events``: a branch's committed events as Server-Sent Events, from
the client's resume point on, for as long as the client stays: whoever appends them (a run of
this host, another host, a ``threads worker``, a library run on the same store).

Framing is the run stream's (``threads.host.stream``): ``id: <seq>`` and ``data:
{"kind":"event","event":...}`` per event, no ``event:``, ``retry:`` or comment lines; there is
no result message, as a thread has no last run. A run of this process wakes its readers at
each append (``Hub``); appends from other processes are found by reading the branch's head
every ``FOLLOW_POLL_S``, and the chain only when the head moved.

Invariant: events go out in seq order, each once, all of those after the resume point, so a
client that reconnects with ``Last-Event-ID: <last seq it saw>`` misses none and sees none
twice. Following never starts, resumes or appends anything. The stream ends when the branch
can no longer be read or the host stops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from threads.errors import ThreadsError
from threads.host.hub import IDLE_S
from threads.host.runs import Runs
from threads.host.stream import event_frame
from threads.log.lines import Event

FOLLOW_POLL_S = 0.25  # how often a branch another process writes is looked at


async def follow(runs: Runs, branch_id: str, after_seq: int) -> AsyncIterator[bytes]:
    store, hub = runs.store, runs.hub
    sent = after_seq
    head: tuple[int, str] | None = None  # the head at the last read of the chain
    while not runs.stopping:
        seen = hub.version(branch_id)
        fresh: list[Event] | None = hub.since(branch_id, sent)
        try:
            if fresh is None:
                info = await store.get_branch(branch_id)
                fresh = []
                if (info.head_seq, info.head_hash) != head and info.head_seq > sent:
                    chain = await store.read_chain(branch_id)
                    head = (chain.branch.head_seq, chain.branch.head_hash)
                    fresh = [e for e in chain.events if e.seq > sent]
        except ThreadsError:
            return  # the branch became unreadable: the client sees the stream end
        for event in fresh:
            if event.seq > sent:
                sent = event.seq
                yield event_frame(event)
        await hub.wait(branch_id, seen, IDLE_S if runs.holds(branch_id) else FOLLOW_POLL_S)
