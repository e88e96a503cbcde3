"""Parent-side helpers for the drills: start workers, read the log, act as the operator.

Everything is read back from where it lives: log lines from the SQLite ``events`` table,
applications from the fake service. Nothing about what a worker did is assumed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from threads import ControlError, Principal, open_thread
from threads.run.model_step import CRASH_RESENDS, IN_DOUBT_REASONS
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import FakeService
from threads.tools.tool import DEFAULT_SETTLE_MS

WORKER = Path(__file__).with_name("worker.py")
STARTER = Principal(issuer="api", tenant="drill", subject="alice")
KILLED = -9
SUMMARY: list[str] = []  # lines the drills print in pytest's terminal summary
LEASE_PAST_MS = 30_000 + 1_000  # the default lease TTL, and a bit


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def log_lines(store_dir: Path) -> list[bytes]:
    """Every stored event line of the store's (single) thread, in seq order."""
    db = store_dir / "threads.db"
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT line FROM events ORDER BY branch_id, seq")
        return [bytes(r[0]) for r in rows]
    finally:
        conn.close()


def log_events(store_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log_lines(store_dir)]


def seqs(store_dir: Path) -> list[int]:
    return [e["seq"] for e in log_events(store_dir)]


def message_text(data: dict[str, Any]) -> str:
    parts = []
    for part in data.get("content") or []:
        if part.get("type") == "text":
            parts.append(part["text"])
        elif part.get("type") == "tool_use":
            parts.append(f"use {part['name']} {json.dumps(part['input'], sort_keys=True)}")
    return "\n".join(parts)


def transcript(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Roles and text of each message, without call ids."""
    out: list[tuple[str, str]] = []
    for e in events:
        if e["type"] == "user_input":
            out.append(("user", e["data"]["text"]))
        elif e["type"] in ("model_response", "model_response_recovered"):
            out.append(("assistant", message_text(e["data"])))
        elif e["type"] == "tool_result":
            text = message_text(e["data"]) or e["data"]["preview"]
            out.append(("tool", text))
    return out


def human_decisions(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(call_id, outcome) of every operator resolution in the log."""
    return [
        (e["data"]["call_id"], e["data"]["outcome"])
        for e in events
        if e["type"] == "effect_resolved" and e["data"]["by"] == "human"
    ]


def call_keys(events: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """effect key -> (call_id, tool name) for every recorded tool call."""
    branch = events[0]["branch_id"] if events else ""
    return {
        f"{branch}:{e['data']['call_id']}": (e["data"]["call_id"], e["data"]["name"])
        for e in events
        if e["type"] == "tool_call"
    }


@dataclass
class Drill:
    """One store directory and one fake service; runs workers against them."""

    root: Path
    service: FakeService
    clock_file: Path | None = None
    offset_ms: int = 0
    runs: int = 0
    kills: int = 0
    prefix_breaks: int = 0
    resend_bound_hits: int = 0
    parked_keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.clock_file is None:
            self.clock_file = self.root / "clock_offset_ms"
        write_atomic(self.clock_file, str(self.offset_ms))

    def advance(self, ms: int) -> None:
        """Move every process's store clock forward (instead of sleeping)."""
        self.offset_ms += ms
        assert self.clock_file is not None
        write_atomic(self.clock_file, str(self.offset_ms))

    @property
    def store_dir(self) -> Path:
        return self.root / "store"

    def spec(self, **fields: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "store": str(self.store_dir),
            "port": self.service.port,
            "profile": "drill",
            "label": f"run{self.runs}",
        }
        if self.clock_file is not None:
            spec["clock_file"] = str(self.clock_file)
        spec.update(fields)
        return spec

    def run(self, **fields: Any) -> dict[str, Any]:
        """One worker run; returns its outcome, or ``{"status": "killed"}``."""
        before = log_lines(self.store_dir)
        spec = self.spec(**fields)
        self.runs += 1
        proc = subprocess.run(
            [sys.executable, str(WORKER), "run", json.dumps(spec)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        after = log_lines(self.store_dir)
        if after[: len(before)] != before:
            self.prefix_breaks += 1
        if proc.returncode == KILLED:
            self.kills += 1
            self.advance(LEASE_PAST_MS)  # the dead holder's lease is over; no sleeping
            return {"status": "killed"}
        if proc.returncode != 0:
            raise AssertionError(f"worker failed ({proc.returncode}):\n{proc.stderr.decode()}")
        return dict(json.loads(proc.stdout.decode().strip().splitlines()[-1]))

    def spawn(self, **fields: Any) -> subprocess.Popen[bytes]:
        """Start one worker run without waiting, for a drill that kills it at a moment the
        parent observes (see ``kill``)."""
        spec = self.spec(**fields)
        self.runs += 1
        return subprocess.Popen(
            [sys.executable, str(WORKER), "run", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL a spawned worker, then move the clock past its lease (no sleeping)."""
        proc.kill()
        proc.communicate(timeout=60)
        assert proc.returncode == KILLED, proc.returncode
        self.kills += 1
        self.advance(LEASE_PAST_MS)

    def thread_id(self) -> str:
        events = log_events(self.store_dir)
        assert events, "no thread was created"
        return str(events[0]["thread_id"])

    def resolve(self, key: str, decision: str) -> None:
        """The operator (the principal who started the thread) settles a parked effect."""
        self.act(lambda thread: thread.resolve_parked(key, decision, STARTER))

    def act(self, action: Any) -> None:
        """Run ``await action(thread)`` as the operator, from this (another) process, on the
        drill's clock; the log must stay a prefix of what it was."""
        before = log_lines(self.store_dir)
        asyncio.run(self._act(action))
        if log_lines(self.store_dir)[: len(before)] != before:
            self.prefix_breaks += 1

    async def _act(self, action: Any) -> None:
        clock = None
        if self.clock_file is not None:
            sys.path.insert(0, str(WORKER.parent))
            from worker import OffsetClock

            clock = OffsetClock(str(self.clock_file))
        store = SQLiteStore(self.store_dir, clock=clock)
        try:
            await action(await open_thread(store, self.thread_id()))
        finally:
            await store.close()

    def settle_park(self, key: str, decide: Any) -> None:
        """Resolve a park; while an earlier holder may still be sending (``assume_not_done``
        refused), a careful operator waits the window out and checks the service again."""
        try:
            self.resolve(key, decide(key))
        except ControlError as error:
            if error.code != "holder_may_be_running":
                raise
            self.advance(DEFAULT_SETTLE_MS + 1)
            self.resolve(key, decide(key))

    def operator_decision(self, key: str) -> str:
        """What a careful operator decides: check the service, then say what happened."""
        return "assume_done" if self.service.client().count(key) >= 1 else "assume_not_done"

    def drive(
        self,
        inputs: list[str],
        kills: list[dict[str, Any] | None],
        *,
        decide: Any = None,
        max_runs: int = 60,
    ) -> dict[str, Any]:
        """Run the thread until every input's turn completed; kill points are used in order
        (one per worker run, ``None`` for no kill). Parks are settled by ``decide(key)``."""
        decide = decide or self.operator_decision
        kills = list(kills)
        for _ in range(max_runs):
            events = log_events(self.store_dir)
            given = sum(1 for e in events if e["type"] == "user_input")
            open_turn = given > sum(1 for e in events if e["type"] == "turn_completed")
            text = inputs[given] if not open_turn and given < len(inputs) else None
            if events and text is None and not open_turn:
                return {"status": "completed"}
            kill = kills.pop(0) if kills else None
            thread = self.thread_id() if events else None
            if thread is None and text is None:
                text = inputs[0]
            result = self.run(thread=thread, input=text, kill=kill)
            if result["status"] == "parked":
                for kind, key in result["pending"]:
                    assert kind == "effect", result
                    self.parked_keys.append(key)
                    self.settle_park(key, decide)
            elif result["status"] == "failed" and resend_bound_reached(log_events(self.store_dir)):
                # Crashes kept landing right after the same model_request: the loop stops
                # resending (bounded crash resends) and ends the turn; the thread is done.
                self.resend_bound_hits += 1
                return {"status": "resend_bound"}
            elif result["status"] not in ("killed", "completed"):
                raise AssertionError(f"unexpected outcome {result}")
        raise AssertionError("the thread did not finish within max_runs worker runs")


def resend_bound_reached(events: list[dict[str, Any]]) -> bool:
    """The log ends with a turn closed ``error`` right after more than ``CRASH_RESENDS``
    attempts of one request were abandoned in doubt, and nothing answered in between."""
    if not events or events[-1]["type"] != "turn_completed":
        return False
    if events[-1]["data"] != {"reason": "error"}:
        return False
    in_doubt = 0
    for event in reversed(events[:-1]):
        if event["type"] in ("model_response", "model_response_recovered", "user_input"):
            break
        if (
            event["type"] == "model_attempt_abandoned"
            and event["data"]["reason"] in IN_DOUBT_REASONS
        ):
            in_doubt += 1
    return in_doubt > CRASH_RESENDS


def duplicates(drill: Drill) -> dict[str, int]:
    """Effect keys applied more than once without an operator's assume_not_done."""
    events = log_events(drill.store_dir)
    keys = call_keys(events)
    accepted = {call for call, outcome in human_decisions(events) if outcome == "assume_not_done"}
    counts = drill.service.client().snapshot()["counts"]
    return {
        key: n for key, n in counts.items() if n > 1 and keys.get(key, ("", ""))[0] not in accepted
    }
