"""Context edits the run writes (issue 32 item 2): old tool results cleared at the threshold or
after an idle spell (all but ``keep_recent``, never ``exclude_tools``), a ``before_tool_result``
hook redacting or clearing a result in the batch that records it, the summarizer's own
``prompt_too_long`` answered by clearing and one more attempt, and ``before_compact`` /
``after_compact`` decisions recorded. Stored results never change; replay stays exact. Both
stores."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from threads import (
    Completed,
    ContextPolicy,
    Extension,
    FakeClock,
    HookDecision,
    Principal,
    agent,
    open_thread,
    tool,
)
from threads.log.lines import Event
from threads.log.render_context import cleared_text
from threads.run.hooks import CompactedView, CompactView, ToolResultView
from threads.store.protocol import Store
from threads.testing.chat_model import ChatModel, prompt_too_long

ALICE = Principal("api", "local", "alice")
SECRET = "secret-123"


class Query(BaseModel):
    query: str


def _lookup(args: Query, ctx: object) -> str:
    return f"result for {args.query}: {SECRET} é " + "data " * 140


LOOKUP = tool(name="lookup", description="Look it up.", input=Query, execute=_lookup,
              effect="read_only")
NO_COMPACT = {"reserve_tokens": 0, "compact_permille": 1000, "keep_tail_tokens": 1}


async def chat(store: Store, model: ChatModel, turns: int, policy: ContextPolicy,
               extensions: tuple[Extension, ...] = (), thread: str | None = None,
               ) -> tuple[str, list[Event]]:
    bot = agent(name="chat", model=model, tools=[LOOKUP], context=policy,
                extensions=extensions)
    for i in range(turns):
        result = await bot.run(f"message {i} " + "words " * 20, store=store, principal=ALICE,
                               thread=thread)
        assert isinstance(result, Completed), result
        thread = result.thread.id
    assert thread is not None
    handle = await open_thread(store, thread, principal=ALICE)
    assert (await handle.replay()).ok
    return thread, await handle.timeline()


def of(log: list[Event], kind: str) -> list[Event]:
    return [e for e in log if e.type == kind]


def shown(model: ChatModel, call_id: str) -> str:
    """The text the newest request showed for ``call_id``'s result."""
    for line in model.requests[-1].messages:
        if line.get("call_id") == call_id:
            return str(line["content"][0]["text"])
    raise AssertionError(f"{call_id} not in the last request")


async def test_old_results_are_cleared_past_the_clear_trigger(store: Store) -> None:
    model = ChatModel(context_window=5000, calls="lookup")
    policy = ContextPolicy(clear_permille=300, keep_recent=2, **NO_COMPACT)
    _, log = await chat(store, model, 8, policy)
    edits = of(log, "context_edited")
    assert edits
    assert {e.data["reason"] for e in edits} == {"threshold"}
    first = edits[0]
    asked = max(e.seq for e in of(log, "model_request") if e.seq < first.seq)
    results = [e.data["call_id"] for e in of(log, "tool_result") if e.seq < asked]
    cleared = [edit["call_id"] for edit in first.data["edits"]]
    assert all(edit["action"] == "clear" for edit in first.data["edits"])
    assert cleared == results[:-2]  # results the model saw, all but the newest keep_recent
    # the model sees the placeholder; the stored result is unchanged
    assert shown(model, cleared[0]) == cleared_text(cleared[0])
    stored = next(e for e in of(log, "tool_result") if e.data["call_id"] == cleared[0])
    assert SECRET in stored.data["content"][0]["text"]
    # each result is cleared once
    every = [edit["call_id"] for e in edits for edit in e.data["edits"]]
    assert len(every) == len(set(every))
    assert "compacted" not in [e.type for e in log]


async def test_excluded_tools_are_never_cleared(store: Store) -> None:
    model = ChatModel(context_window=5000, calls="lookup")
    policy = ContextPolicy(clear_permille=300, keep_recent=0, exclude_tools=("lookup",),
                           **NO_COMPACT)
    _, log = await chat(store, model, 8, policy)
    assert of(log, "context_edited") == []


async def test_an_idle_spell_clears_results_before_the_next_request(
    store: Store, clock: FakeClock
) -> None:
    model = ChatModel(context_window=100_000, calls="lookup")
    policy = ContextPolicy(clear_permille=1000, keep_recent=1, idle_ms=60_000, **NO_COMPACT)
    thread, log = await chat(store, model, 3, policy)
    assert of(log, "context_edited") == []
    clock.advance(60_000)
    _, log = await chat(store, model, 1, policy, thread=thread)
    [edit] = of(log, "context_edited")
    assert edit.data["reason"] == "idle"
    assert len(edit.data["edits"]) == 2  # three shown, the newest kept
    after = log[log.index(edit) + 1]
    assert after.type == "model_request"


def redactor(decision: HookDecision | Exception) -> Extension:
    async def hook(view: ToolResultView) -> HookDecision:
        if isinstance(decision, Exception):
            raise decision
        return decision
    return Extension(name="guard", before_tool_result=hook)


def secret_span() -> HookDecision:
    text = f"result for message 0 {'words ' * 20}: "
    start = len(text.encode())
    return HookDecision("redact", "pii", ((start, start + len(SECRET)),))


async def test_a_hook_redacts_a_result_in_the_batch_that_records_it(store: Store) -> None:
    model = ChatModel(calls="lookup")
    ext = redactor(secret_span())
    _, log = await chat(store, model, 1, ContextPolicy(**NO_COMPACT), (ext,))
    [result] = of(log, "tool_result")
    at = log.index(result)
    decision, edit = log[at + 1], log[at + 2]
    assert decision.type == "hook_decision"
    assert decision.data == {"call_id": result.data["call_id"], "decision": "redact",
                             "extension": "guard", "hook": "before_tool_result",
                             "reason": "pii"}
    assert edit.type == "context_edited"
    assert edit.data["reason"] == "guardrail"
    [item] = edit.data["edits"]
    assert item["action"] == "redact"
    assert item["part"] == 0
    text = shown(model, result.data["call_id"])
    assert SECRET not in text
    assert "[redacted] é" in text
    assert SECRET in result.data["content"][0]["text"]  # stored as it was


@pytest.mark.parametrize("case", ["deny", "raises", "off_boundary", "past_the_end"])
async def test_a_hook_that_objects_otherwise_clears_the_result(store: Store, case: str) -> None:
    answer: HookDecision | Exception = {
        "deny": HookDecision("deny", "not for the model"),
        "raises": RuntimeError("guard down"),
        # 'é' is two bytes in UTF-8: a span ending inside it is off a character boundary
        "off_boundary": HookDecision("redact", None, ((0, 1), (170, 171))),
        "past_the_end": HookDecision("redact", None, ((0, 100_000),)),
    }[case]
    model = ChatModel(calls="lookup")
    if case == "off_boundary":
        text = _lookup(Query(query=f"message 0 {'words ' * 20}"), None)
        inside = text.encode().index("é".encode()) + 1
        answer = HookDecision("redact", None, ((0, inside),))
    _, log = await chat(store, model, 1, ContextPolicy(**NO_COMPACT), (redactor(answer),))
    [result] = of(log, "tool_result")
    [decision] = of(log, "hook_decision")
    assert decision.data["decision"] == {"deny": "deny", "raises": "failed"}.get(case, "redact")
    if case == "raises":
        assert decision.data["reason"] == "RuntimeError: guard down"
    [edit] = of(log, "context_edited")
    assert edit.data == {"edits": [{"action": "clear", "call_id": result.data["call_id"]}],
                         "reason": "guardrail"}
    assert shown(model, result.data["call_id"]) == cleared_text(result.data["call_id"])


async def test_a_proceeding_hook_is_recorded_and_edits_nothing(store: Store) -> None:
    model = ChatModel(calls="lookup")
    _, log = await chat(store, model, 1, ContextPolicy(**NO_COMPACT),
                        (redactor(HookDecision()),))
    assert [e.data["decision"] for e in of(log, "hook_decision")] == ["proceed"]
    assert of(log, "context_edited") == []


TIGHT = ContextPolicy(reserve_tokens=0, compact_permille=500, keep_tail_tokens=100,
                      clear_permille=1000)


async def test_a_summarizer_too_long_clears_every_result_and_asks_again(store: Store) -> None:
    model = ChatModel(context_window=4000, calls="lookup",
                      failures=[("summary", prompt_too_long())])
    _, log = await chat(store, model, 10, TIGHT)
    [abandoned] = of(log, "model_attempt_abandoned")
    at = log.index(abandoned)
    assert abandoned.data["reason"] == "prompt_too_long"
    assert [e.type for e in log[at: at + 5]] == [
        "model_attempt_abandoned", "context_edited", "model_request", "model_response",
        "compacted",
    ]
    edit, retry = log[at + 1], log[at + 2]
    assert edit.data["reason"] == "compaction_fallback"
    shown_before = [e.data["call_id"] for e in of(log, "tool_result") if e.seq < at]
    assert [x["call_id"] for x in edit.data["edits"]] == shown_before  # keep_recent 0
    assert retry.data["purpose"] == "compaction"
    assert retry.data["attempt"] == 2
    assert log[at + 4].data["summary_request_event_id"] == retry.event_id


async def test_a_second_summarizer_too_long_fails_the_compaction(store: Store) -> None:
    model = ChatModel(context_window=1200, failures=[("summary", prompt_too_long())] * 2)
    _, log = await chat(store, model, 12, TIGHT)
    failed = of(log, "compaction_failed")[0]
    assert failed.data["reason"] == "prompt_too_long"
    assert failed.data["stage"] == "summary"
    assert [e.data["reason"] for e in of(log, "model_attempt_abandoned")][:2] == [
        "prompt_too_long"] * 2
    assert "context_edited" not in [e.type for e in log]  # nothing was clearable
    assert of(log, "compacted")  # a later compaction succeeded


def compact_hooks(decision: HookDecision | Exception, seen: list[object]) -> Extension:
    async def before(view: CompactView) -> HookDecision:
        seen.append(view)
        if isinstance(decision, Exception):
            raise decision
        return decision

    async def after(view: CompactedView) -> HookDecision:
        seen.append(view)
        return HookDecision()
    return Extension(name="keeper", before_compact=before, after_compact=after)


@pytest.mark.parametrize("case", ["deny", "raises", "not_allowed"])
async def test_before_compact_denies_a_compaction(store: Store, case: str) -> None:
    answer: HookDecision | Exception = {
        "deny": HookDecision("deny", "keep it all"), "raises": RuntimeError("no"),
        "not_allowed": HookDecision("redact"),
    }[case]
    seen: list[object] = []
    model = ChatModel(context_window=1200)
    _, log = await chat(store, model, 12, TIGHT, (compact_hooks(answer, seen),))
    failed = of(log, "compaction_failed")[0]
    decision = log[log.index(failed) - 1]
    assert decision.type == "hook_decision"
    assert decision.data["hook"] == "before_compact"
    assert decision.data["extension"] == "keeper"
    assert decision.data["decision"] == ("deny" if case == "deny" else "failed")
    assert failed.data == {"reason": "hook_denied", "stage": "hook"}
    assert "summary" not in model.kinds()[: model.kinds().index("turn") + 1]
    assert isinstance(seen[0], CompactView)
    assert seen[0].trigger == "threshold"


async def test_before_compact_guides_the_summary_and_after_compact_is_told(
    store: Store,
) -> None:
    seen: list[object] = []
    model = ChatModel(context_window=1200)
    _, log = await chat(store, model, 12, TIGHT,
                        (compact_hooks(HookDecision("guide", "Keep numbers."), seen),))
    [first, *_] = of(log, "compacted")
    ask = model.requests[model.kinds().index("summary")].messages[-1]["content"][0]["text"]
    assert ask.endswith("\n\nAdditional instructions:\nKeep numbers.")
    after = log[log.index(first) + 1]
    assert after.type == "hook_decision"
    assert after.data == {"decision": "proceed", "extension": "keeper", "hook": "after_compact"}
    told = next(v for v in seen if isinstance(v, CompactedView))
    assert (told.from_seq, told.to_seq) == (first.data["from_seq"], first.data["to_seq"])
    assert told.summary.startswith("summary of")


async def test_a_requested_compaction_falls_back_the_same_way(store: Store) -> None:
    model = ChatModel(calls="lookup")
    thread_id, _ = await chat(store, model, 3, ContextPolicy(**NO_COMPACT))
    thread = await open_thread(store, thread_id, principal=ALICE)
    requested = await thread.compact(ALICE)
    model.failures.append(("summary", prompt_too_long()))
    _, log = await chat(store, model, 1, ContextPolicy(**NO_COMPACT), thread=thread_id)
    at = next(i for i, e in enumerate(log) if e.event_id == requested)
    assert [e.type for e in log[at: at + 7]] == [
        "compaction_requested", "model_request", "model_attempt_abandoned", "context_edited",
        "model_request", "model_response", "compacted",
    ]
    edit, retry, compacted = log[at + 3], log[at + 4], log[at + 6]
    assert edit.data["reason"] == "compaction_fallback"
    assert len(edit.data["edits"]) == 3  # every result shown, none kept
    assert retry.data["cause_event_id"] == requested
    assert retry.data["attempt"] == 2
    assert compacted.data["trigger"] == "manual"
    assert compacted.data["summary_request_event_id"] == retry.event_id
    cleared = model.requests[model.kinds().index("summary") + 1]
    texts = [m["content"][0].get("text", "") for m in cleared.messages if m["role"] == "tool"]
    assert texts
    assert all(t.startswith("[tool result cleared") for t in texts)


async def test_a_failing_after_compact_hook_ends_the_turn(store: Store) -> None:
    async def broken(view: CompactedView) -> HookDecision:
        raise RuntimeError("index offline")

    ext = Extension(name="indexer", after_compact=broken)
    bot = agent(name="chat", model=ChatModel(context_window=1200), context=TIGHT,
                extensions=[ext])
    thread: str | None = None
    results = []
    for i in range(12):
        result = await bot.run(f"message {i} " + "words " * 20, store=store, principal=ALICE,
                               thread=thread)
        thread = result.thread.id
        results.append(result)
    failed = [r for r in results if not isinstance(r, Completed)]
    assert failed
    assert failed[0].error.code == "hook_failed"  # type: ignore[attr-defined]
    assert "indexer: RuntimeError: index offline" in failed[0].error.message  # type: ignore[attr-defined]
    log = await (await open_thread(store, thread, principal=ALICE)).timeline()
    compacted = of(log, "compacted")[0]
    after = log[log.index(compacted) + 1: log.index(compacted) + 3]
    assert [e.type for e in after] == ["hook_decision", "turn_completed"]
    assert after[0].data["decision"] == "failed"
    assert after[1].data == {"reason": "error"}
    after_failure = results[results.index(failed[0]) + 1]
    assert isinstance(after_failure, Completed)  # the next turn goes on, the compaction kept
