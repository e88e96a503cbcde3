"""What a run does with each stop reason of a reply that asked for no tool, and with a request
it must not send: pause_turn is requested again as-is (bounded), max_tokens is continued with
the trusted continuation instruction (bounded, then ``max_output``), context_window_exceeded
ends the turn ``context_exhausted``, and content the model can't take ends the turn before any
model_request: a coded ``Failed``, never a raise (an artifact the request needs and the store
lacks is a coded ``Failed`` too, with the turn left open for when the bytes are back)."""

from __future__ import annotations

import hashlib
from typing import Any

from threads import Completed, Failed, Principal, agent
from threads.log.lines import Event
from threads.log.render import prefix_digest, prefix_line
from threads.run.stops import CONTINUE_TEXT
from threads.run.writer import BranchWriter
from threads.store.protocol import Store
from threads.testing.scripted import say, scripted_model

ALICE = Principal("api", "acme", "alice")
PNG = b"\x89PNG not really an image"


def turn_events(events: list[Event]) -> list[tuple[str, Any]]:
    last_input = max(e.seq for e in events if e.type == "user_input")
    shown = []
    for e in events:
        if e.seq <= last_input:
            continue
        detail = {
            "model_response": e.data.get("stop_reason"),
            "turn_completed": e.data.get("reason"),
            "injected": e.data.get("text"),
        }.get(e.type)
        shown.append((e.type, detail))
    return shown


async def test_pause_turn_is_requested_again_as_is(store: Store) -> None:
    model = scripted_model([
        say("Searching.", stop_reason="pause_turn"), say("Still.", stop_reason="pause_turn"),
        say("Found it."),
    ])
    bot = agent(name="t", model=model)
    result = await bot.run("find it", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "Found it."
    assert turn_events(await result.thread.timeline()) == [
        ("model_request", None), ("model_response", "pause_turn"),
        ("model_request", None), ("model_response", "pause_turn"),
        ("model_request", None), ("model_response", "end_turn"),
        ("turn_completed", "end_turn"),
    ]
    # nothing was added between the requests: each holds the paused reply as the model sent it
    assert [len(r.messages) for r in model.requests] == [1, 2, 3]


async def test_pause_turn_is_bounded(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("...", stop_reason="pause_turn")] * 4))
    result = await bot.run("find it", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "model_error"
    events = turn_events(await result.thread.timeline())
    assert events.count(("model_request", None)) == 4  # the first and 3 continuations
    assert events[-1] == ("turn_completed", "error")


async def test_max_tokens_is_continued_then_ends_max_output(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("Part", stop_reason="max_tokens")] * 4))
    result = await bot.run("write the report", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    events = turn_events(await result.thread.timeline())
    assert events.count(("injected", CONTINUE_TEXT)) == 3
    assert events[-3:] == [
        ("model_request", None), ("model_response", "max_tokens"), ("turn_completed", "max_output")
    ]
    replayed = await result.thread.replay()  # the continuations re-render byte for byte
    assert (replayed.requests, replayed.mismatch) == (4, None)


async def test_context_window_exceeded_ends_the_turn_context_exhausted(store: Store) -> None:
    model = scripted_model([say("Half an answer", stop_reason="context_window_exceeded")])
    result = await agent(name="t", model=model).run("go", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "context_exhausted"
    ended = turn_events(await result.thread.timeline())[-1]
    assert ended == ("turn_completed", "context_exhausted")


async def _thread_with_image_input(
    store: Store, model: Any, *, stored: bool
) -> tuple[Any, str]:
    """A finished thread whose next turn's user_input holds an image part (as another writer
    records one), left open for the next run to continue; ``stored``: the store holds it."""
    bot = agent(name="t", model=model)
    first = await bot.run("hi", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    lease = await store.acquire_lease(branch.branch_id, "other-writer", 60_000)
    chain = await store.read_chain(branch.branch_id)
    writer = BranchWriter(store, lease, chain.fold(store.clock.now_ms()))
    digest = hashlib.sha256(PNG).hexdigest()
    image = {"bytes": len(PNG), "media_type": "image/png", "sha256": digest}
    if stored:
        image = await store.put_artifact(PNG, "image/png")
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image_ref", "ref": image, "width": 10, "height": 10}]
    user = {"kind": "user", "principal": ALICE.to_wire()}
    await writer.append([("user_input", {"content": content, "source": "api"}, user)])
    await store.release_lease(writer.lease)
    return bot, first.thread.id


async def test_content_the_model_cannot_take_is_refused_before_dispatch(
    store: Store,
) -> None:
    model = scripted_model([say("hello")])  # text input only
    bot, thread_id = await _thread_with_image_input(store, model, stored=True)
    result = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "content_unsupported"
    assert turn_events(await result.thread.timeline()) == [("turn_completed", "error")]
    [ended] = [e for e in await result.thread.timeline() if e.type == "turn_completed"][-1:]
    assert ended.data == {"code": "content_unsupported", "reason": "error"}
    assert len(model.requests) == 1  # only the first turn's request was sent


async def test_a_missing_artifact_is_a_coded_failure_that_leaves_the_turn_open(
    store: Store,
) -> None:
    """An artifact the request needs is not in the store: ``Failed(artifact_missing)``, nothing
    recorded (the turn stays open, as the loop leaves it for any missing bytes), no request
    sent; once the bytes are stored, the next run continues the same turn."""
    model = scripted_model([say("hello"), say("a picture")], input_modalities=("text", "image"))
    bot, thread_id = await _thread_with_image_input(store, model, stored=False)
    head = (await store.root_branch(thread_id)).head_seq
    result = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "artifact_missing"
    assert result.error.seq == head  # the user_input that references it
    assert (await store.root_branch(thread_id)).head_seq == head  # nothing recorded
    assert len(model.requests) == 1  # only the first turn's request was sent
    await store.put_artifact(PNG, "image/png")
    again = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(again, Completed), again
    assert again.output == "a picture"
    assert turn_events(await again.thread.timeline())[-1] == ("turn_completed", "end_turn")


async def test_a_paused_reply_left_by_a_crash_is_continued_not_interrupted(
    store: Store,
) -> None:
    """A writer died right after recording a pause_turn reply: the next run asks again (the
    paused reply is no answer), instead of closing the turn ``interrupted``."""
    model = scripted_model([say("hello"), say("written by hand"), say("Found it.")])
    bot = agent(name="t", model=model)
    first = await bot.run("hi", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    lease = await store.acquire_lease(branch.branch_id, "the-writer-that-died", 60_000)
    writer = BranchWriter(store, lease, (await store.read_chain(branch.branch_id)).fold(0))
    user = {"kind": "user", "principal": ALICE.to_wire()}
    await writer.append([("user_input", {"source": "api", "text": "search"}, user)])
    prefix = prefix_digest(prefix_line(writer.fold.thread_started))
    ref = {"bytes": 1, "media_type": "application/x-ndjson", "sha256": "0" * 64}
    [request] = await writer.append([("model_request", {
        "attempt": 1, "declared_prefix": prefix, "request_ref": ref}, {"kind": "host"})])
    paused = {"completeness": "complete", "content": [{"type": "text", "text": "Searching."}],
              "request_event_id": request.event_id, "stop_reason": "pause_turn",
              "usage": {"input_tokens": 1, "output_tokens": 1}}
    await writer.append([("model_response", paused, {"kind": "model"})])
    await store.release_lease(writer.lease)
    result = await bot.run(None, store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "Found it."
    assert turn_events(await result.thread.timeline())[-3:] == [
        ("model_request", None), ("model_response", "end_turn"), ("turn_completed", "end_turn")
    ]


async def test_another_providers_signed_reasoning_is_refused_before_dispatch(
    store: Store,
) -> None:
    """A reply another writer recorded carries signed reasoning from another provider: the
    next request would hand it to a model that can't continue it, so the turn ends
    ``continuation_unsupported`` (recorded, and the run's result) and nothing is sent."""
    model = scripted_model([say("hello"), say("(recorded by hand)"), say("never sent")])
    bot = agent(name="t", model=model)
    first = await bot.run("hi", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    lease = await store.acquire_lease(branch.branch_id, "another-writer", 60_000)
    writer = BranchWriter(store, lease, (await store.read_chain(branch.branch_id)).fold(0))
    user = {"kind": "user", "principal": ALICE.to_wire()}
    await writer.append([("user_input", {"source": "api", "text": "think"}, user)])
    prefix = prefix_digest(prefix_line(writer.fold.thread_started))
    ref = {"bytes": 1, "media_type": "application/x-ndjson", "sha256": "0" * 64}
    [request] = await writer.append([("model_request", {
        "attempt": 1, "declared_prefix": prefix, "request_ref": ref}, {"kind": "host"})])
    signed = await store.put_artifact(b'{"signature":"abc"}', "application/json")
    reasoning = {"type": "reasoning", "provider": "other", "model": "other-1",
                 "format": "other_thinking", "ref": signed}
    reply = {"completeness": "complete",
             "content": [reasoning, {"type": "text", "text": "Thought about it."}],
             "request_event_id": request.event_id, "stop_reason": "end_turn",
             "usage": {"input_tokens": 1, "output_tokens": 1}}
    await writer.append([("model_response", reply, {"kind": "model"}),
                         ("turn_completed", {"reason": "end_turn"}, {"kind": "host"}),
                         ("user_input", {"source": "api", "text": "go on"}, user)])
    await store.release_lease(writer.lease)

    result = await bot.run(None, store=store, thread=first.thread.id, principal=ALICE)

    assert isinstance(result, Failed)
    assert result.error.code == "continuation_unsupported"
    [ended] = [e for e in await result.thread.timeline() if e.type == "turn_completed"][-1:]
    assert ended.data == {"code": "continuation_unsupported", "reason": "error"}
    assert len(model.requests) == 1  # only the first turn's request was sent
    assert [e.type for e in await result.thread.timeline()][-2:] == [
        "user_input", "turn_completed"]  # refused before any model_request was recorded
