"""Crash drills for MCP tools: a worker running an agent on a real MCP server (stdio child,
Streamable HTTP or SSE on loopback) is SIGKILLed inside the MCP call of each effect class,
once the server has applied the effect and before its answer reaches the worker. The thread is
run again in a fresh worker, and the class's outcome is asserted against the fake service's own
counts: idempotent is resent with the same key and deduplicated by the server; reconcilable is
settled by its lookup (another tool of the same server) without a resend; unguarded parks, and
the operator's decision finishes it; read-only runs again. Also: a kill right after
``effect_begin`` (never sent) settles a final lookup's not-found by a resend once no earlier
holder can still deliver; and a fence drill: a holder frozen past its lease (moved clock, no
sleeping) sends nothing, over stdio and HTTP. Every case ends with no duplicates and a restart
that appends nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drill_harness import SUMMARY, Drill, duplicates, log_events

from threads.testing.fake_service import FakeService

sys.path.insert(0, str(Path(__file__).parents[1] / "mcp"))
from harness import http_process

pytestmark = pytest.mark.drill

MCP_WORKER = Path(__file__).with_name("mcp_worker.py")
TOOLS = {"idempotent": "charge", "reconcilable": "refund", "unguarded": "send_email",
         "read_only": "look_up"}
SETTLE_PAST_MS = 120_000 + 30_000 + 1_000  # an MCP tool's settle window (timeout + margin)
FIGURES: dict[str, int] = {"kills": 0, "duplicates": 0, "parks": 0, "resent": 0,
                           "reconciled": 0, "frozen_holders": 0, "frozen_sends": 0}
CASES = [
    *[("stdio", c) for c in TOOLS],
    *[("streamable-http", c) for c in TOOLS],
    ("sse", "idempotent"),
    ("sse", "unguarded"),
]


@pytest.fixture(scope="module", autouse=True)
def report_figures() -> Iterator[None]:
    yield
    SUMMARY.append(f"MCP drills: {FIGURES}")


@contextlib.contextmanager
def endpoint(service: FakeService, transport: str, hold: dict[str, Any]) -> Iterator[
    dict[str, Any]
]:
    """The worker fields that reach the server: a stdio child's spec, or a running server's
    URL (started here with ``hold``)."""
    if transport == "stdio":
        pid_key = f"pid-{uuid.uuid4()}"
        try:
            yield {"server": {"hold": hold, "pid_key": pid_key}}
        finally:
            pid = service.client().lookup(pid_key)
            if pid is not None:  # a child the killed worker left behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        return
    with http_process(service.port, transport, hold=hold) as url:
        yield {"mcp_url": url}


def key_of(drill: Drill, tool: str) -> str:
    events = log_events(drill.store_dir)
    (call_id,) = [e["data"]["call_id"] for e in events
                  if e["type"] == "tool_call" and e["data"]["name"] == f"mcp__svc__{tool}"]
    return f"{events[0]['branch_id']}:{call_id}"


def finish(drill: Drill, **fields: Any) -> None:
    """No duplicates, and one more restart appends nothing."""
    found = duplicates(drill)
    FIGURES["duplicates"] += sum(found.values())
    assert found == {}
    assert drill.prefix_breaks == 0
    assert drill.rerun_adds_nothing(**fields)


@pytest.mark.parametrize(("transport", "effect_class"), CASES)
def test_kill_inside_the_call(
    transport: str, effect_class: str, service: FakeService, tmp_path: Path
) -> None:
    tool = TOOLS[effect_class]
    gate = f"in-call-{uuid.uuid4()}"
    client = service.client()
    drill = Drill(tmp_path, service, worker=MCP_WORKER)
    with endpoint(service, transport, {"tool": tool, "gate": gate, "when": "after"}) as where:
        proc = drill.spawn(tool=tool, input="go", **where)
        client.await_waiting(gate)  # the server applied it and holds the answer
        proc.kill()
        # a stdio child shares the worker's stderr: let it answer into the void and exit
        client.open_gate(gate)
        drill.kill(proc)
        FIGURES["kills"] += 1
        events = log_events(drill.store_dir)
        last = events[-1]["type"]
        assert last == ("permission_decision" if effect_class == "read_only" else "effect_begin")
        result = drill.run(thread=drill.thread_id(), input=None, tool=tool, **where)
        events = log_events(drill.store_dir)
        resolved = [e["data"] for e in events if e["type"] == "effect_resolved"]
        key = key_of(drill, tool)
        snapshot = client.snapshot()
        if effect_class == "idempotent":
            assert result["status"] == "completed", result
            assert resolved == [{"by": "provider_dedup", "call_id": resolved[0]["call_id"],
                                 "outcome": "safe_to_retry"}]
            begins = [e["data"]["attempt"] for e in events if e["type"] == "effect_begin"]
            assert begins == [1, 2]
            assert snapshot["requests"][key] == 2
            assert snapshot["counts"][key] == 1
            FIGURES["resent"] += 1
        elif effect_class == "reconcilable":
            assert result["status"] == "completed", result
            assert [(r["outcome"], r["by"]) for r in resolved] == [("confirmed_success",
                                                                     "reconcile")]
            assert snapshot["requests"][key] == 1
            (text,) = [e["data"]["preview"] for e in events if e["type"] == "tool_result"]
            assert "refunded 2" in text
            assert 'untrusted="true"' in text
            FIGURES["reconciled"] += 1
        elif effect_class == "unguarded":
            assert result["status"] == "parked", result
            assert result["pending"] == [["effect", key]]
            FIGURES["parks"] += 1
            assert snapshot["requests"][key] == 1
            drill.resolve(key, "assume_done")  # the operator checked: it was sent
            assert drill.run(thread=drill.thread_id(), input=None, tool=tool,
                             **where)["status"] == "completed"
        else:
            assert result["status"] == "completed", result
            assert not any(e["type"].startswith("effect_") for e in events)
        assert client.snapshot()["counts"].get(key, 0) == (0 if effect_class == "read_only"
                                                             else 1)
        finish(drill, tool=tool, **where)


def test_kill_before_sending_settles_a_final_not_found_by_resending(
    service: FakeService, tmp_path: Path
) -> None:
    drill = Drill(tmp_path, service, worker=MCP_WORKER)
    kill = {"type": "effect_begin", "tool": "mcp__svc__refund", "nth": 1}
    with endpoint(service, "stdio", {}) as where:
        assert drill.run(tool="refund", input="go", kill=kill, **where)["status"] == "killed"
        FIGURES["kills"] += 1
        key = key_of(drill, "refund")
        # a final not-found, and the holder was SIGKILLed on this host (proven gone: it can
        # deliver nothing more), so the call is resent at once, without waiting settle_ms
        again = drill.run(thread=drill.thread_id(), input=None, tool="refund", **where)
        assert again["status"] == "completed", again
        events = log_events(drill.store_dir)
        resolved = [(e["data"]["outcome"], e["data"]["by"]) for e in events
                    if e["type"] == "effect_resolved"]
        assert resolved == [("safe_to_retry", "reconcile")]
        assert service.client().snapshot()["requests"][key] == 1
        FIGURES["resent"] += 1
        finish(drill, tool="refund", **where)


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
def test_frozen_holder_past_its_lease_sends_nothing(
    transport: str, service: FakeService, tmp_path: Path
) -> None:
    gate = f"frozen-{uuid.uuid4()}"
    client = service.client()
    drill = Drill(tmp_path, service, worker=MCP_WORKER)
    hold = {"type": "effect_begin", "tool": "mcp__svc__send_email", "nth": 1,
            "hold_at_gate": gate, "port": service.port}
    with endpoint(service, transport, {}) as where:
        frozen = drill.spawn(tool="send_email", input="go", kill=hold, **where)
        client.await_waiting(gate)  # effect_begin is durable; its event loop is blocked
        drill.advance(30_000 + 1_000)  # past its lease, on every process's clock
        key = key_of(drill, "send_email")
        taken = drill.run(thread=drill.thread_id(), input=None, tool="send_email", **where)
        assert taken["status"] == "parked", taken  # the new holder can't tell: it parks
        FIGURES["parks"] += 1
        client.open_gate(gate)  # the frozen holder wakes up and goes on with its call
        out, err = frozen.communicate(timeout=120)
        assert frozen.returncode == 0, err.decode()
        FIGURES["frozen_holders"] += 1
        FIGURES["frozen_sends"] += client.snapshot()["requests"].get(key, 0)
        assert key not in client.snapshot()["requests"]  # it sent nothing
        assert b"stale_epoch" in out + err
        drill.advance(SETTLE_PAST_MS)
        drill.resolve(key, "assume_not_done")  # the operator checked: it never arrived
        done = drill.run(thread=drill.thread_id(), input=None, tool="send_email", **where)
        assert done["status"] == "completed", done
        snapshot = client.snapshot()
        assert snapshot["requests"][key] == 1
        assert snapshot["counts"][key] == 1
        finish(drill, tool="send_email", **where)
