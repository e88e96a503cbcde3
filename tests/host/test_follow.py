"""``GET /v1/threads/{id}/events`` on a real ``threads serve``: it follows a thread that a
library run in another process is writing, sends each committed event once with its seq as
the SSE id, and resumes after a dropped connection from ``Last-Event-ID`` with no gap and no
duplicate. The run waits at fake-service gates the test opens, so nothing sleeps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from console_support import finished, library_run
from host_support import HostServer

from threads.testing.fake_service import FakeService

pytestmark = [pytest.mark.race, pytest.mark.timeout(120)]
Frames = Iterator[tuple[int | None, dict[str, Any]]]


def frames(response: httpx.Response) -> Frames:
    """(id, data) per SSE message of an open stream."""
    ident: int | None = None
    data = ""
    for line in response.iter_lines():
        assert not line.startswith(("event:", "retry:", ":")), line  # the reference's framing
        if line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("data: "):
            data += line[6:]
        elif line == "" and data:
            yield ident, json.loads(data)
            ident, data = None, ""


def read_until(stream: Frames, done: Any) -> list[tuple[int, dict[str, Any]]]:
    got: list[tuple[int, dict[str, Any]]] = []
    for ident, message in stream:
        assert message["kind"] == "event"
        assert ident == message["event"]["seq"]
        got.append((ident, message["event"]))
        if done(message["event"]):
            return got
    raise AssertionError("the stream ended")


def gate_call(name: str) -> Any:
    return lambda e: e["type"] == "tool_call" and e["data"]["input"] == {"name": name}


def test_follow_a_thread_another_process_runs_and_resume_after_a_drop(
    console_server: HostServer, service: FakeService
) -> None:
    process, tid = library_run(console_server, "watcher", "Watch the gates")
    try:
        _follow(console_server, service, process, tid)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _follow(
    console_server: HostServer, service: FakeService, process: Any, tid: str
) -> None:
    alice = console_server.client()
    path = f"/v1/threads/{tid}/events"
    with alice.stream("GET", path) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = frames(response)
        before = read_until(stream, gate_call("first"))
        service.client().open_gate("first")  # the other process goes on while we listen
        during = read_until(stream, gate_call("second"))
    seqs = [seq for seq, _ in before + during]
    assert seqs == list(range(1, len(seqs) + 1))  # every event once, in order
    # written by the other process after the gate opened, so after this stream began
    assert "tool_result" in [e["type"] for _, e in during]

    # The connection is gone; the run ends meanwhile; a reconnect picks up after the last seq.
    service.client().open_gate("second")
    assert finished(process) == "completed"
    last = seqs[-1]
    with alice.stream("GET", path, headers={"last-event-id": str(last)}) as response:
        rest = read_until(frames(response), lambda e: e["type"] == "turn_completed")
    assert [seq for seq, _ in rest] == list(range(last + 1, last + 1 + len(rest)))
    with alice.stream("GET", path + f"?after_seq={last + 1}") as response:
        again = read_until(frames(response), lambda e: e["type"] == "turn_completed")
    assert again == rest[1:]

    eve = console_server.client("eve-token")
    assert eve.get(path).status_code == 404  # another tenant: no such thread
    assert alice.get(path, headers={"last-event-id": "x1"}).status_code == 400
    assert alice.get(path + "?branch_id=nope").status_code == 404
    assert console_server.client(None).get(path).status_code == 401
