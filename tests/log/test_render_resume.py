"""A continuing run's next request rendered from a request checkpoint and the events after it
equals the request rendered from the whole log (issue 36 item 1): bytes, hash, the lines an
adapter gets and their part types, for random logs of every line-making event (inputs, steers,
replies with reasoning, tool results and late ones, injected context, heartbeats, tool sets,
compactions and summarizer requests, context edits, denied inputs, settings epochs), cut
anywhere (a crash mid-write), and with the process restarted from its latest checkpoint at
random points. The checkpoint is used whenever nothing after it rewrites an earlier line, and a
checkpoint that does not match its log is refused."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threads.clock import FakeClock
from threads.log.event_types import EventType
from threads.log.hashing import sha256_hex
from threads.log.json_types import JsonObject
from threads.log.lines import Actor, Event
from threads.log.render import RenderCache, Rendered, render
from threads.log.render_resume import (
    CheckpointUnusableError,
    RequestCheckpoint,
    checkpoint_of,
    resume,
)
from threads.log.request_bytes import RequestBytes
from threads.testing.sample_log import HOST, MODEL, USER, SampleLog

REWRITES = ("compacted", "settings_changed", "context_edited")
_STEPS = st.sampled_from([
    "input", "input", "request", "request", "reply", "reasoning", "result", "result", "late",
    "steer", "injected", "heartbeat", "tools", "compact", "clear", "redact", "deny", "deny_old",
    "settings", "omit", "side", "restart",
])


class World:
    """A log being written as a run writes it: each turn request is the render of the log
    before it by the run's cache, which a restart replaces by one resumed from the latest
    checkpoint (through its bytes)."""

    def __init__(self) -> None:
        self.log = SampleLog(FakeClock())
        self.log.started()
        self.started: JsonObject = self.log.events[0].data
        self.artifacts: dict[str, bytes] = {}
        self.cache = RenderCache()
        self.checkpoints: list[RequestCheckpoint] = []
        self.calls: list[str] = []
        self.inputs: list[Event] = []

    @property
    def events(self) -> list[Event]:
        return self.log.events

    def add(self, type_: EventType, data: Any, actor: Actor = HOST) -> Event:
        return self.log.add(type_, data, actor)  # data built here as plain JSON

    def step(self, kind: str, n: int) -> None:
        add = self.add
        if kind == "input":
            self.inputs.append(add("user_input", {"source": "api", "text": f"ask {n}"}, USER))
        elif kind == "steer":
            self.inputs.append(add("steer", {"text": f"steer {n}"}, USER))
        elif kind == "request":
            rendered = render(self.started, self.events, self.artifacts, self.cache)
            assert_same(rendered, render(self.started, self.events, self.artifacts))
            request = add("model_request", {
                "attempt": 1, "declared_prefix": rendered.declared_prefix(),
                "request_ref": rendered.request_ref(),
            })
            checkpoint = checkpoint_of(self.cache, request)
            assert checkpoint is not None
            self.checkpoints.append(checkpoint)
        elif kind in ("reply", "reasoning"):
            content: list[JsonObject] = [{"type": "text", "text": f"reply {n}"}]
            if kind == "reasoning":
                content.insert(0, {"type": "reasoning", "text": f"thought {n}"})
            add("model_response", {"content": content, "request_event_id": "r"}, MODEL)
        elif kind == "result":
            call = f"call_{n}"
            self.calls.append(call)
            add("tool_result", {"call_id": call, "is_error": False,
                                "content": [{"type": "text", "text": f"result text {n}"}]})
        elif kind == "late" and self.calls:
            add("tool_result_late", {"call_id": self.calls[n % len(self.calls)],
                                     "is_error": False, "preview": f"late {n}"})
        elif kind == "injected":
            add("injected", {"source": "memory", "trust": "untrusted_reference",
                             "origin": {"id": f"m{n}"}, "text": f"fact {n}"})
        elif kind == "heartbeat" and self.calls:
            add("heartbeat", {"running_call_ids": self.calls[-1:]})
        elif kind == "tools":
            tool = {"name": f"t{n}", "description": "d", "input_schema": {"type": "object"}}
            add("tools_changed", {"tools": [tool]})
        elif kind == "compact" and len(self.events) > 3:
            text = f"summary {n}".encode()
            sha = sha256_hex(text)
            self.artifacts[sha] = text
            start = self.events[1 + n % (len(self.events) - 2)].seq
            add("compacted", {"from_seq": start, "to_seq": self.log.last_seq, "summary_ref": {
                "bytes": len(text), "media_type": "text/plain", "sha256": sha}})
        elif kind in ("clear", "redact") and self.calls:
            call = self.calls[n % len(self.calls)]
            edit: JsonObject = {"action": "clear", "call_id": call}
            if kind == "redact":
                edit = {"action": "redact", "call_id": call, "part": 0,
                        "spans": [{"start": 1, "end": 4}]}
            add("context_edited", {"edits": [edit]})
        elif kind in ("deny", "deny_old") and self.inputs:
            named = self.inputs[-1] if kind == "deny" else self.inputs[n % len(self.inputs)]
            add("hook_decision", {"hook": "before_input", "decision": "deny",
                                  "input_event_id": named.event_id})
        elif kind in ("settings", "omit"):
            carry = "omit_prior" if kind == "omit" else "keep"
            add("settings_changed", {"settings": {
                "adapter": self.started["adapter"], "model": {"name": f"m{n}", "provider": "p"},
                "model_params": {"max_tokens": 100 + n}, "reasoning_carryover": carry}})
        elif kind == "side":
            side = add("model_request", {"attempt": 1, "purpose": "compaction"})
            add("model_response", {"content": [{"type": "text", "text": "gist"}],
                                   "request_event_id": side.event_id}, MODEL)
        elif kind == "restart" and self.checkpoints:
            self.cache = restarted(self.checkpoints[-1], self.started, self.events)


def restarted(
    checkpoint: RequestCheckpoint, started: JsonObject, events: Sequence[Event]
) -> RenderCache:
    """A new process's cache, going on from the checkpoint as read back from its bytes."""
    cache = RenderCache()
    cache.resumed = resume(RequestCheckpoint.decode(checkpoint.encode()), started, events)
    assert cache.resumed is not None
    return cache


def assert_same(got: Rendered, expected: Rendered) -> None:
    assert bytes(got.body) == bytes(expected.body)
    assert (got.sha256, got.body.size) == (expected.sha256, expected.body.size)
    assert got.declared_prefix() == expected.declared_prefix()
    assert got.prefix == expected.prefix
    assert list(got.messages) == list(expected.messages)
    # with the same key order, which an adapter serializing them as given would show a cache
    assert json.dumps(list(got.messages)) == json.dumps(list(expected.messages))
    assert got.part_types == expected.part_types


def rewritten_after(events: Sequence[Event], seq: int) -> bool:
    return any(e.type in REWRITES or (e.type == "hook_decision" and e.seq > seq)
               for e in events if e.seq > seq)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(_STEPS, min_size=1, max_size=40), cuts=st.lists(st.integers(0, 60)))
def test_the_next_request_from_a_checkpoint_is_the_one_from_the_whole_log(
    steps: list[str], cuts: list[int]
) -> None:
    world = World()
    for n, kind in enumerate(steps):
        world.step(kind, n)
    events, started, artifacts = world.events, world.started, world.artifacts
    for checkpoint in world.checkpoints:
        at = checkpoint.seq - events[0].seq
        # a run resumed on the log cut anywhere after its request (a crash mid-write), then
        # rendering as it goes on: each request equals the whole log's
        ends = sorted({at + 1 + cut % (len(events) - at) for cut in cuts} | {len(events)})
        cache = restarted(checkpoint, started, events)
        for end in ends:
            seen = events[:end]
            got = render(started, seen, artifacts, cache)
            assert_same(got, render(started, seen, artifacts))
            if not rewritten_after(seen, checkpoint.seq):
                assert cache.resumed is not None  # it was used, not a full render


def test_a_checkpoint_renders_only_the_lines_after_it() -> None:
    world = World()
    for n, kind in enumerate(["input", "request", "reply", "result", "input", "request"] * 20):
        world.step(kind, n)
    world.step("reply", 999)
    checkpoint = world.checkpoints[-1]
    cache = restarted(checkpoint, world.started, world.events)
    assert cache.resumed is not None
    got = render(world.started, world.events, world.artifacts, cache)
    assert cache.resumed is not None
    assert len(cache.resumed.tail.entries) == 1  # the reply after the request, no other line
    assert_same(got, render(world.started, world.events, world.artifacts))
    # it says it extends the recorded request: a store keeps it as the bytes it adds
    assert got.body.base is not None
    assert got.body.base.sha256 == checkpoint.sha256


def _world() -> World:
    world = World()
    for n, kind in enumerate(["input", "request", "reply", "input", "request"]):
        world.step(kind, n)
    return world


@pytest.mark.parametrize("change", [
    "event_id", "seq", "sha256", "body", "settings", "side",
])
def test_a_checkpoint_that_does_not_match_its_log_is_refused(change: str) -> None:
    world = _world()
    checkpoint = world.checkpoints[-1]
    events = world.events
    if change == "event_id":
        checkpoint = dataclasses.replace(checkpoint, event_id="other")
    elif change == "seq":
        checkpoint = dataclasses.replace(checkpoint, seq=checkpoint.seq - 1)
    elif change == "sha256":
        checkpoint = dataclasses.replace(checkpoint, sha256="0" * 64)
    elif change == "body":
        data = bytes(checkpoint.body).replace(b"ask 0", b"ask 9")
        body = RequestBytes([data], [0], 1, len(data), checkpoint.sha256)
        checkpoint = dataclasses.replace(checkpoint, body=body)
    elif change == "settings":
        settings = {"adapter": world.started["adapter"], "model": {"name": "x", "provider": "p"},
                    "model_params": {}, "reasoning_carryover": "keep"}
        checkpoint = dataclasses.replace(checkpoint, settings=settings)
    else:  # a summarizer's request is no turn's
        side = world.log.add("model_request", {"attempt": 1, "purpose": "compaction"})
        checkpoint = dataclasses.replace(checkpoint, seq=side.seq, event_id=side.event_id)
    assert resume(checkpoint, world.started, events) is None


@pytest.mark.parametrize("raw", [b"", b"{}", b'{"format":2}\n', b'{"format":1}\nx', b"\xff\n"])
def test_bytes_this_code_did_not_write_are_refused(raw: bytes) -> None:
    with pytest.raises(CheckpointUnusableError):
        RequestCheckpoint.decode(raw)


def test_a_checkpoint_reads_back_as_written() -> None:
    world = World()
    for n, kind in enumerate(["input", "request", "reply", "result", "redact", "clear", "deny",
                              "omit", "input", "request"]):
        world.step(kind, n)
    checkpoint = world.checkpoints[-1]
    again = RequestCheckpoint.decode(checkpoint.encode())
    assert bytes(again.body) == bytes(checkpoint.body)
    assert dataclasses.replace(again, body=checkpoint.body) == checkpoint


@pytest.mark.parametrize("rewrite", ["compact", "settings", "omit", "deny_old", "clear"])
def test_an_event_rewriting_an_earlier_line_renders_every_line_again(rewrite: str) -> None:
    world = World()
    for n, kind in enumerate(["input", "result", "request", "reply", "input"]):
        world.step(kind, n)
    cache = restarted(world.checkpoints[-1], world.started, world.events)
    world.step(rewrite, 0)  # names the first input, the first call, the first seq
    got = render(world.started, world.events, world.artifacts, cache)
    assert cache.resumed is None
    assert_same(got, render(world.started, world.events, world.artifacts))
