"""A fake external service in its own process, for crash and lease drills.

It applies ``charge``, ``refund`` and ``email`` requests and counts every application per
idempotency key, so a drill reads back from the service (never assumes) how often an effect
really happened. The idempotent API (``dedup=True``) applies a key once and answers repeats with
the stored value; the unguarded API applies every request. ``lookup(key)`` is what a
reconcilable tool asks after a crash. ``wait_gate(name)`` blocks the caller until the parent
opens that gate, so a drill can hold a worker at a known point without sleeping;
``await_waiting(name)`` blocks the parent until a worker has reached the gate.

Wire: one JSON object per line over loopback TCP, one answer line per request. The same service
also speaks HTTP on a second loopback port (``http_port``), for tools that send through the run's
fenced client (``ctx.http``): ``POST /apply`` takes the ``apply`` fields as a JSON body, ``GET
/lookup?key=`` answers like ``lookup``. An HTTP ``apply`` may carry a fencing token (``fence``:
``{"scope": s, "epoch": n}``): the service refuses (409, nothing applied) any token older than the
newest it has seen for that scope, the way a provider that accepts the run's epoch does; with
``hold`` (a gate name) it waits at that gate first, like a request still on the wire. Every HTTP
request the service processed is logged (``snapshot()["http"]``, with what it refused).

    service = FakeService.start()          # spawns ``python -m threads.testing.fake_service``
    client = ServiceClient(service.port)   # usable from any process that knows the port
    client.apply("charge", key, "charged 5", dedup=True)
    client.count(key); client.lookup(key); service.stop()
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NotRequired, TypedDict
from urllib.parse import parse_qs, urlsplit

from threads.log.json_types import JsonObject


class FenceToken(TypedDict):
    scope: str
    epoch: int


class Request(TypedDict):
    """One request line (or an HTTP apply's body): ``op`` and the fields that op reads."""

    op: NotRequired[str]
    kind: NotRequired[str]
    key: NotRequired[str]
    value: NotRequired[str]
    who: NotRequired[str]
    dedup: NotRequired[bool]
    fence: NotRequired[FenceToken | None]
    hold: NotRequired[str]
    name: NotRequired[str]
    count: NotRequired[int]


class Applied(TypedDict):
    kind: str
    key: str
    who: str


class HttpEntry(TypedDict):
    path: str
    key: str
    who: str
    fence: FenceToken | None
    refused: str | None


class ServiceSnapshot(TypedDict):
    """Everything the service did, as ``snapshot`` answers it."""

    counts: dict[str, int]
    requests: dict[str, int]
    values: dict[str, str]
    log: list[Applied]
    waiting: dict[str, int]
    http: list[HttpEntry]


class _State:
    """Everything the service knows; guarded by one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # an HTTP apply checks its fence and applies under it
        self.arrived = threading.Condition(self.lock)
        self.values: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.requests: dict[str, int] = {}
        self.log: list[Applied] = []
        self.gates: dict[str, threading.Event] = {}
        self.waiting: dict[str, int] = {}
        self.fences: dict[str, int] = {}  # scope -> newest epoch seen
        self.http: list[HttpEntry] = []

    def fenced_apply(self, req: Request) -> tuple[int, JsonObject]:
        """An HTTP apply: refused when its fencing token is older than one already seen. With
        ``hold``, the request first waits at that gate (a request still on the wire)."""
        if req.get("hold"):
            self.wait_gate(req["hold"])
        fence = req.get("fence")
        with self.lock:
            entry: HttpEntry = {"path": "/apply", "key": req["key"], "who": req.get("who", ""),
                     "fence": fence, "refused": None}
            self.http.append(entry)
            if fence is not None:
                newest = self.fences.get(fence["scope"], fence["epoch"])
                if fence["epoch"] < newest:
                    entry["refused"] = "stale_epoch"
                    return 409, {"refused": "stale_epoch", "newest": newest}
                self.fences[fence["scope"]] = fence["epoch"]
            return 200, self.apply(req)

    def apply(self, req: Request) -> JsonObject:
        key, value = req["key"], req["value"]
        with self.lock:
            self.requests[key] = self.requests.get(key, 0) + 1
            if req.get("dedup") and key in self.values:
                return {"value": self.values[key], "applied": False}
            self.counts[key] = self.counts.get(key, 0) + 1
            self.values[key] = value
            self.log.append({"kind": req["kind"], "key": key, "who": req.get("who", "")})
            return {"value": value, "applied": True}

    def gate(self, name: str) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(name, threading.Event())

    def wait_gate(self, name: str) -> JsonObject:
        gate = self.gate(name)
        with self.lock:
            self.waiting[name] = self.waiting.get(name, 0) + 1
            self.arrived.notify_all()
        gate.wait()
        return {}

    def await_waiting(self, name: str, count: int) -> JsonObject:
        with self.arrived:
            ok = self.arrived.wait_for(lambda: self.waiting.get(name, 0) >= count, timeout=60)
        return {"ok": ok}

    def handle(self, req: Request) -> JsonObject | ServiceSnapshot:
        op = req["op"]
        if op == "apply":
            return self.apply(req)
        if op == "wait_gate":
            return self.wait_gate(req["name"])
        if op == "await_waiting":
            return self.await_waiting(req["name"], req.get("count", 1))
        if op == "open_gate":
            self.gate(req["name"]).set()
            return {}
        with self.lock:
            if op == "lookup":
                key = req["key"]
                return {"found": key in self.values, "value": self.values.get(key)}
            if op == "count":
                return {"count": self.counts.get(req["key"], 0)}
            if op == "snapshot":
                return {"counts": dict(self.counts), "requests": dict(self.requests),
                        "values": dict(self.values), "log": list(self.log),
                        "waiting": dict(self.waiting), "http": list(self.http)}
        return {"error": f"unknown op {op!r}"}


class _Handler(socketserver.StreamRequestHandler):
    state: _State

    def handle(self) -> None:
        for line in self.rfile:
            answer = self.state.handle(json.loads(line))
            self.wfile.write(json.dumps(answer).encode() + b"\n")
            self.wfile.flush()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _HTTPHandler(BaseHTTPRequestHandler):
    state: _State

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/apply":
            self._answer(404, {"error": f"no route {self.path}"})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self._answer(*self.state.fenced_apply(body))

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path != "/lookup":
            self._answer(404, {"error": f"no route {self.path}"})
            return
        query = parse_qs(url.query)
        key, who = query.get("key", [""])[0], query.get("who", [""])[0]
        with self.state.lock:
            self.state.http.append({"path": "/lookup", "key": key, "who": who, "fence": None,
                                    "refused": None})
        self._answer(200, self.state.handle({"op": "lookup", "key": key}))

    def _answer(self, status: int, answer: JsonObject | ServiceSnapshot) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the drills read the service's own log, not stderr


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True


def serve() -> None:
    """Run the service in this process; print its two ports, stop when stdin closes."""
    state = _State()
    _Handler.state = _HTTPHandler.state = state
    server = _Server(("127.0.0.1", 0), _Handler)
    http = _HTTPServer(("127.0.0.1", 0), _HTTPHandler)
    for s in (server, http):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print(server.server_address[1], http.server_address[1], flush=True)
    sys.stdin.read()
    for s in (server, http):
        s.shutdown()
        s.server_close()


class ServiceClient:
    """A blocking client; one short-lived connection per request (safe across fork/kill)."""

    def __init__(self, port: int, who: str = "") -> None:
        self.port = port
        self.who = who

    def call(self, op: str, **fields: Any) -> JsonObject:
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as conn:
            conn.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
            with conn.makefile("rb") as reader:
                answer: JsonObject = json.loads(reader.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def apply(self, kind: str, key: str, value: str, *, dedup: bool) -> str:
        answer = self.call("apply", kind=kind, key=key, value=value, dedup=dedup, who=self.who)
        return str(answer["value"])

    def lookup(self, key: str) -> str | None:
        answer = self.call("lookup", key=key)
        value = answer["value"]
        return value if answer["found"] and isinstance(value, str) else None

    def count(self, key: str) -> int:
        count = self.call("count", key=key)["count"]
        if not isinstance(count, int):
            raise RuntimeError(f"the service answered a count of {count!r}")
        return count

    def snapshot(self) -> JsonObject:
        return self.call("snapshot")

    def wait_gate(self, name: str) -> None:
        self.call("wait_gate", name=name)

    def await_waiting(self, name: str, count: int = 1) -> None:
        """Block until ``count`` callers have reached gate ``name`` (no polling, no sleeping)."""
        if not self.call("await_waiting", name=name, count=count)["ok"]:
            raise TimeoutError(f"nobody reached gate {name}")

    def open_gate(self, name: str) -> None:
        self.call("open_gate", name=name)


@dataclass
class FakeService:
    """A running service process (the parent's handle)."""

    process: subprocess.Popen[bytes]
    port: int
    http_port: int

    @classmethod
    def start(cls) -> FakeService:
        process = subprocess.Popen(
            [sys.executable, "-m", "threads.testing.fake_service"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert process.stdout is not None
        port, http_port = (int(p) for p in process.stdout.readline().split())
        return cls(process, port, http_port)

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[FakeService]:
        """A started service, stopped on exit (a test module's fixture)."""
        service = cls.start()
        try:
            yield service
        finally:
            service.stop()

    def client(self, who: str = "parent") -> ServiceClient:
        return ServiceClient(self.port, who)

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


if __name__ == "__main__":
    serve()
