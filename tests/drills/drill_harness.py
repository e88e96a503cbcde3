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
from threads.run.model_retry import IN_DOUBT_REASONS
from threads.run.retry_policy import RetryPolicy
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import FakeService
from threads.tools.tool import DEFAULT_SETTLE_MS

CRASH_RESENDS = RetryPolicy().crash_resends  # the default policy's resends of an in-doubt request
WORKER = Path(__file__).with_name("worker.py")
STARTER = Principal(issuer="api", tenant="drill", subject="alice")
KILLED = -9
SUMMARY: list[str] = []  # lines the drills print in pytest's terminal summary
LEASE_PAST_MS = 30_000 + 1_000  # the default lease TTL, and a bit


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def branch_lines(store_dir: Path) -> dict[str, list[bytes]]:
    """Every stored event line of the store, per branch, in seq order (nothing yet: empty)."""
    db = store_dir / "threads.db"
    out: dict[str, list[bytes]] = {}
    if not db.exists():
        return out
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT branch_id, line FROM events ORDER BY branch_id, seq")
        for branch, line in rows:
            out.setdefault(branch, []).append(bytes(line))
    except sqlite3.OperationalError as exc:
        # a kill while the first open was creating the schema leaves no table: no events yet
        if "no such table" not in str(exc):
            raise
    finally:
        conn.close()
    return out


def log_lines(store_dir: Path) -> list[bytes]:
    """Every stored event line of the store's (single) thread, in seq order."""
    return [line for lines in branch_lines(store_dir).values() for line in lines]


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


@dataclass(frozen=True)
class KillState:
    """The last durable event at a kill (None: nothing was written) and the service's counts."""

    last: dict[str, Any] | None
    counts: dict[str, int]

    @property
    def last_type(self) -> str | None:
        return None if self.last is None else str(self.last["type"])


@dataclass
class Drill:
    """One store directory and one fake service; runs workers against them."""

    root: Path
    service: FakeService
    clock_file: Path | None = None
    worker: Path = WORKER  # the worker script a run starts (mcp_worker.py for the MCP drills)
    offset_ms: int = 0
    runs: int = 0
    kills: int = 0
    prefix_breaks: int = 0
    resend_bound_hits: int = 0
    parked_keys: list[str] = field(default_factory=list)
    # what the store and the service held right after each SIGKILL, before any rerun
    at_kill: list[KillState] = field(default_factory=list)

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
            [sys.executable, str(self.worker), "run", json.dumps(spec)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        after = log_lines(self.store_dir)
        if after[: len(before)] != before:
            self.prefix_breaks += 1
        if proc.returncode == KILLED:
            self.kills += 1
            self.at_kill.append(self.kill_state())
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
            [sys.executable, str(self.worker), "run", json.dumps(spec)],
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

    def kill_state(self) -> KillState:
        events = log_events(self.store_dir)
        return KillState(events[-1] if events else None, self.service.client().snapshot()["counts"])

    def rerun_adds_nothing(self, **fields: Any) -> bool:
        """Run the thread once more with no input: a settled thread completes and appends
        nothing (the restart-again half of a kill drill)."""
        before = log_lines(self.store_dir)
        result = self.run(thread=self.thread_id(), input=None, **fields)
        return result["status"] == "completed" and log_lines(self.store_dir) == before

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
        **fields: Any,
    ) -> dict[str, Any]:
        """Run the thread until every input's turn completed; kill points are used in order
        (one per worker run, ``None`` for no kill). Parks are settled by ``decide(key)``.
        ``fields`` go into every worker's spec (``profile``, ...)."""
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
            result = self.run(thread=thread, input=text, kill=kill, **fields)
            if result["status"] == "parked":
                for kind, key in result["pending"]:
                    assert kind == "effect", result
                    self.parked_keys.append(key)
                    self.settle_park(key, decide)
            elif result["status"] in ("failed", "killed") and resend_bound_reached(
                log_events(self.store_dir)
            ):
                # Crashes kept landing right after the same model_request: the loop stops
                # resending (bounded crash resends) and ends the turn; the thread is done.
                # A kill can land after that end is durable and before the run returns it.
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
    return duplicate_counts(log_events(drill.store_dir), drill.service.client().snapshot())


def duplicate_counts(events: list[dict[str, Any]], service: dict[str, Any]) -> dict[str, int]:
    """Of the log's effect keys, those the service (its snapshot) applied more than once
    without an operator's assume_not_done, with their counts."""
    keys = call_keys(events)
    accepted = {call for call, outcome in human_decisions(events) if outcome == "assume_not_done"}
    return {
        key: n
        for key, n in service["counts"].items()
        if n > 1 and key in keys and keys[key][0] not in accepted
    }

ASSUMED_DONE = "assumed done by an operator; not sent again"
LOOK_UP_TEXT = "account {account} is open"
NOT_RUN = ("not_executed", "denied")


def tool_message_problems(events: list[dict[str, Any]], service: dict[str, Any]) -> list[str]:
    """Each tool message in the log checked against what the service applied (``service`` is
    its snapshot): an operator's ``assume_done`` stands for an application the service has; an
    executed effect's text is the service's receipt for its key; no effectful result without an
    application (unless it never ran); each key applied at most once, plus once for each
    ``assume_not_done`` an operator chose. Returns what is wrong, empty when all holds."""
    calls = {e["data"]["call_id"]: e["data"] for e in events if e["type"] == "tool_call"}
    branch = events[0]["branch_id"] if events else ""
    not_done = [call for call, outcome in human_decisions(events) if outcome == "assume_not_done"]
    counts, receipts = service["counts"], service["values"]
    problems: list[str] = []
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    for call_id in calls:
        n = sum(1 for r in results if r["call_id"] == call_id)
        if n != 1:
            problems.append(f"{call_id}: {n} tool results")
    for result in results:
        call = calls[result["call_id"]]
        key = f"{branch}:{result['call_id']}"
        text = message_text(result) or result["preview"]
        applied = counts.get(key, 0)
        where = f"{call['name']} {result['call_id']} ({result['origin']})"
        if applied > 1 + not_done.count(result["call_id"]):
            problems.append(f"{where}: applied {applied} times")
        if call["name"] == "look_up":
            if result["origin"] not in NOT_RUN and text != LOOK_UP_TEXT.format(**call["input"]):
                problems.append(f"{where}: {text!r} is not the look-up's answer")
        elif result["origin"] in NOT_RUN:
            if applied:
                problems.append(f"{where}: applied {applied} times but never ran")
        elif text == ASSUMED_DONE:
            if not applied:
                problems.append(f"{where}: assumed done, but the service never applied it")
        elif text != receipts.get(key):
            problems.append(f"{where}: {text!r} is not the service's receipt"
                            f" {receipts.get(key)!r}")
    return problems
