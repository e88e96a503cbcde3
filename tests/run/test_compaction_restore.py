"""A compaction's restore (issue 32, digest-2 §1.5 "L3"), on real runs, both stores: the files
the sandbox file tools touched in the compacted range come back newest first as attachments
(their content when UTF-8 and small enough, else a line saying they were not restored), at most
``restore_max_files``; a run without a sandbox restores none; a background child still running
gets a ``heartbeat``; all of it in the ``compacted`` event's own append, and ``replay`` renders
the same requests."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from pydantic import BaseModel

from threads import Completed, ContextPolicy, Principal, agent, open_thread, tool
from threads.clock import SystemClock
from threads.log.lines import Event
from threads.models.fence import Fence
from threads.models.protocol import ModelOutput, ModelRequest, TextDelta, Usage
from threads.sandbox.bubblewrap import BWRAP, LocalSandbox, local
from threads.store.protocol import Store
from threads.testing.chat_model import kind_of, prompt_too_long
from threads.testing.scripted import Fail, ScriptedModel, ScriptItem, call, say, use
from threads.tools.tool import Tool

ALICE = Principal("api", "acme", "alice")
SUMMARY = "the summary"
RESTORED = ("injected", "heartbeat")


class InOrder(ScriptedModel):
    """Plays its script in request order whatever the request holds (a compaction shortens
    the conversation a position is counted from), and answers every summarizer request with
    ``SUMMARY`` without using the script."""

    def __init__(self, script: Sequence[ScriptItem]) -> None:
        super().__init__(script)
        self.answered = 0

    def _replies_in(self, messages: Sequence[object]) -> int:
        return self.answered

    async def stream(
        self, request: ModelRequest, fence: Fence
    ) -> AsyncIterator[TextDelta | ModelOutput]:
        if kind_of(request) == "summary":
            await fence.check()
            self.requests.append(request)
            yield ModelOutput(content=[{"type": "text", "text": SUMMARY}],
                              stop_reason="end_turn", usage=Usage(10, 5))
            return
        async for item in super().stream(request, fence):
            yield item
        self.answered += 1


@pytest.fixture
def clock() -> SystemClock:
    """The sandbox's leases keep the machine's time (the ``store`` fixture reads this)."""
    return SystemClock()


@pytest.fixture
def provider(tmp_path: Path) -> LocalSandbox:
    if not BWRAP or not Path(BWRAP).exists():
        pytest.skip(f"bubblewrap is not installed at {BWRAP}")
    return local(tmp_path / "sandboxes", cpu_seconds=20, memory_mb=512, pids=64)


def batches(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The event types of every append to ``store``, one list per append."""
    seen: list[list[str]] = []
    append = store.append

    async def recording(branch_id: str, events: list[Event], **kwargs: object) -> None:
        await append(branch_id, events, **kwargs)  # type: ignore[arg-type]
        seen.append([e.type for e in events])

    monkeypatch.setattr(store, "append", recording)
    return seen


def after_compacted(log: list[Event]) -> list[Event]:
    """The restore events right after the ``compacted`` event."""
    at = next(i for i, e in enumerate(log) if e.type == "compacted")
    tail = log[at + 1:]
    return tail[: next(i for i, e in enumerate(tail) if e.type not in RESTORED)]


WORK = [
    use(call("write_file", path="/workspace/a.txt", content="hello")),
    use(call("bash", command="printf '\\377\\376' > bin.dat")),
    use(call("read_file", path="/workspace/bin.dat")),
    use(call("write_file", path="/workspace/big.txt", content="x" * 21)),
    use(call("read_file", path="/workspace/a.txt")),
    use(call("read_file", path="/workspace/gone.txt")),
    say("done"),
    say("after"),
]
NEWEST_FIRST = ["/workspace/gone.txt", "/workspace/a.txt", "/workspace/big.txt",
                "/workspace/bin.dat"]


def not_restored(path: str) -> str:
    return f"[{path} was not restored; read it again if needed]"


async def compact_after_work(
    store: Store, provider: LocalSandbox | None, policy: ContextPolicy,
    monkeypatch: pytest.MonkeyPatch, script: Sequence[ScriptItem] = tuple(WORK),
) -> tuple[list[Event], list[list[str]], InOrder]:
    """Turn 1 works on files, an operator asks for a compaction, turn 2 runs it first."""
    model = InOrder(script)
    tools = [] if provider is not None else [READ_FILE]
    bot = agent(name="coder", model=model, sandbox=provider, context=policy, tools=tools)
    first = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(first, Completed), first
    thread = await open_thread(store, first.thread.id, principal=ALICE)
    await thread.compact(ALICE)
    seen = batches(store, monkeypatch)
    second = await bot.run("next", store=store, principal=ALICE, thread=first.thread.id)
    assert isinstance(second, Completed), second
    assert (await thread.replay()).ok  # the requests render byte-identical from the log
    return await thread.timeline(), seen, model


@pytest.mark.parametrize("max_files", [5, 2])
async def test_the_files_touched_in_the_range_come_back_in_the_compacted_batch(
    store: Store, provider: LocalSandbox, monkeypatch: pytest.MonkeyPatch, max_files: int,
) -> None:
    policy = ContextPolicy(restore_file_tokens=5, restore_max_files=max_files)  # 20 bytes
    log, seen, model = await compact_after_work(store, provider, policy, monkeypatch)
    restored = after_compacted(log)
    paths = NEWEST_FIRST[:max_files]
    assert [e.data["origin"]["id"] for e in restored] == paths
    assert ["compacted", *["injected"] * len(paths)] in seen  # one append
    by_path = {e.data["origin"]["id"]: e for e in restored}
    hello = by_path["/workspace/a.txt"]
    assert hello.data == {
        "origin": {"id": "/workspace/a.txt", "version": hashlib.sha256(b"hello").hexdigest()},
        "source": "attachment", "trust": "untrusted_reference", "text": "hello",
    }
    assert hello.actor == {"kind": "host"}
    for path in paths:  # missing, over 20 bytes, not UTF-8
        if path != "/workspace/a.txt":
            assert by_path[path].data == {
                "origin": {"id": path}, "source": "attachment",
                "trust": "untrusted_reference", "text": not_restored(path),
            }
    # the model's next request sees them after the summary, in the same order
    shown = [m["content"][0]["text"] for m in model.requests[-1].messages]
    assert shown[0].startswith('<reference source="summary"')
    assert [s.split('"')[3] for s in shown[1:1 + len(paths)]] == paths
    assert '<reference source="attachment" id="/workspace/a.txt" untrusted="true">\nhello\n' \
        '</reference>' in shown
    started = next(e for e in log if e.type == "thread_started")
    assert started.data["policy"]["context"]["restore"] == {
        "file_tokens": 5, "max_files": max_files, "skill_tokens": 5_000,
        "skills_total_tokens": 25_000,
    }


class FilePath(BaseModel):
    path: str


async def _pretend(args: FilePath, ctx: object) -> str:
    return f"read {args.path}"


READ_FILE: Tool[object] = tool(name="read_file", description="Not a sandbox.", input=FilePath,
                               execute=_pretend, effect="read_only")


async def test_a_run_without_a_sandbox_restores_no_file(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its ``read_file`` is its own tool: there is no sandbox to read the files from."""
    script = [use(call("read_file", path="/workspace/a.txt")), say("done"), say("after")]
    log, seen, _ = await compact_after_work(store, None, ContextPolicy(), monkeypatch, script)
    assert after_compacted(log) == []
    assert ["compacted"] in seen


class Hold(BaseModel):
    text: str


async def test_a_running_background_child_gets_a_heartbeat(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reactive compaction while a background child works: its call is listed running."""
    released = asyncio.Event()
    seen = batches(store, monkeypatch)
    append = store.append

    async def releasing(branch_id: str, events: list[Event], **kwargs: object) -> None:
        await append(branch_id, events, **kwargs)  # type: ignore[arg-type]
        if any(e.type == "compacted" for e in events):
            released.set()

    monkeypatch.setattr(store, "append", releasing)

    async def hold(args: Hold, ctx: object) -> str:
        await asyncio.wait_for(released.wait(), 30)
        return "held"

    holding: Tool[object] = tool(name="hold", description="Hold.", input=Hold, execute=hold,
                   effect="read_only")
    child = agent(name="clerk", model=InOrder([use(call("hold", text="x")), say("held")]),
                  tools=[holding])
    roomy = ContextPolicy(reserve_tokens=0, compact_permille=1000, keep_tail_tokens=1)
    parent = agent(name="boss", model=InOrder([
        say("hello"),
        use(call("spawn_agent", agent="clerk", prompt="hold", background=True)),
        Fail(prompt_too_long()),
        say("started"),
        say("reacted"),
    ]), subagents=[child], context=roomy)
    first = await parent.run("hi", store=store, principal=ALICE)
    result = await parent.run("go", store=store, principal=ALICE, thread=first.thread.id)
    assert isinstance(result, Completed), result
    log = await result.thread.timeline()
    [placeholder] = [e for e in log if e.type == "tool_result"
                     and e.data["origin"] == "deferred"]
    restored = after_compacted(log)
    assert [e.type for e in restored] == ["heartbeat"]
    assert restored[0].data == {"running_call_ids": [placeholder.data["call_id"]]}
    assert ["compacted", "heartbeat"] in seen  # one append
    late = next(e for e in log if e.type == "tool_result_late")
    assert late.seq > restored[0].seq
    assert (await result.thread.replay()).ok
