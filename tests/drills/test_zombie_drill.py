"""The zombie window (issue 11, finding 3), in real processes: a holder frozen inside a tool past
its lease is taken over, and whatever it had under way must not become a second application.

For every effect class a holder runs one call of that class and is frozen with SIGSTOP inside
the tool (blocked on a service gate, so its lease renewal starves too); the store clock is moved
past its lease (nobody sleeps); a second runner takes the thread over and settles the call;
then the first is resumed. The fake service runs in its own process and counts applications.

``before_send``: the holder is frozen before its send; it wakes while the window is still open
and sends through ``ctx.http``, whose fence refuses it: nothing of it reaches the service. The
taker must not resend what it can't prove undone while the holder may still be sending: the
reconcilable ``final`` not-found parks (and is asked again once the window is over), and an
operator's ``assume_not_done`` is refused until then.

``in_flight``: the holder's request has passed its fence and is held by the service (a request on
the wire); it is delivered only after the window closed and the taker resent. It carries
``ctx.epoch`` as a fencing token, so the service refuses it: a provider that accepts the token
closes even the gap a time window can't.

Asserted each time: 0 duplicates at the service, the resumed holder's writes refused
(``stale_epoch``), the log a prefix of itself across the resume, every tool message matching
the service's record.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from drill_harness import (
    LEASE_PAST_MS,
    SUMMARY,
    Drill,
    call_keys,
    duplicates,
    log_events,
    log_lines,
    tool_message_problems,
)

from threads import ControlError
from threads.testing.fake_service import FakeService
from threads.tools.tool import DEFAULT_SETTLE_MS

pytestmark = pytest.mark.drill

CLASSES = {"read_only": "look_up", "idempotent": "charge_card", "reconcilable_final": "refund",
           "reconcilable_nonfinal": "transfer", "unguarded": "send_email"}
# reads carry no fencing token: a late read is harmless, so only sends are held in flight
CASES = [*[(c, "before_send") for c in CLASSES],
         *[(c, "in_flight") for c in CLASSES if c != "read_only"]]
PARKS_AT_TAKEOVER = ("reconcilable_final", "reconcilable_nonfinal", "unguarded")
WINDOW_PAST_MS = DEFAULT_SETTLE_MS + 1_000
TALLY: dict[str, int] = {"cases": 0, "refused_by_fence": 0, "refused_by_epoch": 0, "parks": 0,
                         "operator_refusals": 0, "duplicates": 0}


def key_of(drill: Drill, name: str) -> str:
    [key] = [k for k, (_, n) in call_keys(log_events(drill.store_dir)).items() if n == name]
    return key


@pytest.mark.parametrize(("effect_class", "at"), CASES, ids=[f"{c}-{a}" for c, a in CASES])
def test_frozen_holder_past_its_lease_applies_nothing_twice(
    effect_class: str, at: str, service: FakeService, tmp_path: Path
) -> None:
    name = CLASSES[effect_class]
    drill = Drill(tmp_path, service)
    client = service.client()
    gate = f"zombie-{effect_class}-{at}-{os.getpid()}-{tmp_path.name}"
    fields: dict[str, Any] = {"profile": "one_call", "tool": name, "settle_ms": DEFAULT_SETTLE_MS,
                              "http_port": service.http_port}
    who = f"holder-{tmp_path.name}"  # the service is shared by the module's cases
    holder = drill.spawn(input="go", label=who, **fields,
                         freeze={"tool": name, "gate": gate, "at": at})
    try:
        client.await_waiting(gate)
        os.kill(holder.pid, signal.SIGSTOP)
        frozen_at = log_events(drill.store_dir)[-1]["type"]
        assert frozen_at == ("permission_decision" if name == "look_up" else "effect_begin")
        drill.advance(LEASE_PAST_MS)  # the frozen holder's lease is over by the store's clock
        taken = drill.run(thread=drill.thread_id(), input=None, label="taker", **fields)
        key = key_of(drill, name)
        if effect_class in PARKS_AT_TAKEOVER:
            assert taken["status"] == "parked", taken
            [detail] = taken["details"]  # what the operator is told about the park
            assert "earlier holder" in detail, detail
            assert client.count(key) == 0, "the taker re-sent while the holder may be sending"
            TALLY["parks"] += 1
            with pytest.raises(ControlError) as refused:
                drill.resolve(key, "assume_not_done")  # the service shows nothing yet
            assert refused.value.code == "holder_may_be_running"
            TALLY["operator_refusals"] += 1
        else:
            assert taken["status"] == "completed", taken
        if at == "before_send":
            lines = wake(drill, holder, gate)  # inside the window: the fence must stop it
            assert not [h for h in client.snapshot()["http"] if h["who"] == who]
            TALLY["refused_by_fence"] += 1
            settle(drill, fields)
        else:
            settle(drill, fields)  # the window is over and the taker resent
            lines = wake(drill, holder, gate)  # now the held request arrives
            [late] = [h for h in client.snapshot()["http"] if h["who"] == who]
            assert late["refused"] == "stale_epoch", late
            TALLY["refused_by_epoch"] += 1
    finally:
        if holder.poll() is None:
            client.open_gate(gate)
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.communicate(timeout=30)
    assert log_lines(drill.store_dir)[: len(lines)] == lines
    events = log_events(drill.store_dir)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert drill.prefix_breaks == 0
    snapshot = client.snapshot()
    if name != "look_up":
        assert snapshot["counts"].get(key) == 1, snapshot["counts"].get(key)
    TALLY["duplicates"] += len(duplicates(drill))
    assert duplicates(drill) == {}
    assert tool_message_problems(events, snapshot) == []
    assert drill.rerun_adds_nothing(**fields)
    TALLY["cases"] += 1
    if TALLY["cases"] == len(CASES):
        SUMMARY.append(
            f"zombie drill: {TALLY['cases']} holders frozen past their lease (every effect"
            f" class; before their send and with a send in flight), {TALLY['refused_by_fence']}"
            f" sends refused by the ctx.http fence, {TALLY['refused_by_epoch']} late sends"
            f" refused by their ctx.epoch token, {TALLY['parks']} parks instead of a resend,"
            f" {TALLY['operator_refusals']} assume_not_done refused inside the window,"
            f" {TALLY['duplicates']} duplicates"
        )


def wake(drill: Drill, holder: Any, gate: str) -> list[bytes]:
    """Open the holder's gate and resume it; it must end refused, having written nothing."""
    lines = log_lines(drill.store_dir)
    drill.service.client().open_gate(gate)
    os.kill(holder.pid, signal.SIGCONT)
    out, err = holder.communicate(timeout=60)
    assert holder.returncode == 0, err.decode()
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["status"] == "failed", result
    assert result["error"] == "stale_epoch", result
    assert set(result["refused_appends"]) <= {"stale_epoch"}, result
    assert log_lines(drill.store_dir) == lines, "the resumed holder reached the log"
    return lines


def settle(drill: Drill, fields: dict[str, Any]) -> None:
    """Past the window, run the thread to the end of its turn; an operator settles parks after
    checking the service."""
    drill.advance(WINDOW_PAST_MS)
    assert drill.drive(["go"], [], **fields)["status"] == "completed"
