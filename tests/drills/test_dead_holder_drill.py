"""A holder proven dead is acted on at once; one that can't be proven dead is not (issue 28).

A holder SIGKILLed inside its send (waiting at a service gate: it never sent) is dead on this
host: its pid no longer runs the process that started. The next run takes the thread over
without waiting for the lease (the clock never moves) and without the zombie window: a
reconcilable tool's ``final`` not-found is resent at once, and an unguarded tool parks with
words that say the holder is gone and only a person can tell (no lookup), and the operator's
``assume_not_done`` is taken at once. A holder SIGSTOPped there instead is alive (frozen): past
its lease the taker parks, says it may still be running, and ``assume_not_done`` is refused.
Each case: exactly one application at the service.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from drill_harness import LEASE_PAST_MS, STARTER, Drill, call_keys, duplicates, log_events

from threads import ControlError
from threads.cli.main import main
from threads.testing.fake_service import FakeService
from threads.tools.tool import DEFAULT_SETTLE_MS

pytestmark = pytest.mark.drill

TOOLS = {"reconcilable_final": "refund", "unguarded": "send_email"}


def key_of(drill: Drill, name: str) -> str:
    [key] = [k for k, (_, n) in call_keys(log_events(drill.store_dir)).items() if n == name]
    return key


def held_in_the_send(drill: Drill, name: str, label: str) -> tuple[Any, dict[str, Any], str]:
    """A holder blocked inside ``name``'s tool before its send; (process, fields, gate)."""
    gate = f"dead-{name}-{os.getpid()}-{drill.root.name}-{label}"
    fields: dict[str, Any] = {"profile": "one_call", "tool": name,
                              "settle_ms": DEFAULT_SETTLE_MS,
                              "http_port": drill.service.http_port}
    holder = drill.spawn(input="go", label=label, **fields,
                         freeze={"tool": name, "gate": gate, "at": "before_send"})
    drill.service.client().await_waiting(gate)
    return holder, fields, gate


@pytest.mark.parametrize("effect_class", list(TOOLS))
def test_a_holder_killed_mid_call_is_acted_on_at_once(
    effect_class: str, service: FakeService, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = TOOLS[effect_class]
    drill = Drill(tmp_path, service)
    holder, fields, gate = held_in_the_send(drill, name, f"killed-{tmp_path.name}")
    holder.kill()  # SIGKILL; the clock stays put: its lease is still live by the store
    holder.communicate(timeout=60)
    service.client().open_gate(gate)
    taken = drill.run(thread=drill.thread_id(), input=None, label="taker", **fields)
    key = key_of(drill, name)
    if effect_class == "reconcilable_final":
        assert taken["status"] == "completed", taken  # not found, final, nobody sending: resent
    else:
        assert taken["status"] == "parked", taken
        [detail] = taken["details"]
        assert "(epoch 2) is gone: its process no longer runs on this host" in detail, detail
        assert "send_email has no lookup, so only a person can tell" in detail, detail
        assert "may still be running" not in detail
        assert "lookup is asked" not in detail
        assert service.client().count(key) == 0
        # the operator's listing says the same, from the store alone (another process)
        assert main(["approvals", drill.thread_id(), "--store", str(drill.store_dir),
                     "--tenant", STARTER.tenant, "--subject", STARTER.subject]) == 0
        listed = " ".join(capsys.readouterr().out.split())
        assert "(epoch 2) is gone" in listed, listed
        assert "send_email has no lookup, so only a person can tell" in listed
        assert "may still" not in listed
        drill.resolve(key, "assume_not_done")  # at once: the dead holder sends nothing
        assert drill.drive(["go"], [], **fields)["status"] == "completed"
    assert service.client().count(key) == 1
    assert duplicates(drill) == {}
    assert drill.rerun_adds_nothing(**fields)


def test_a_frozen_holder_stays_refused(service: FakeService, tmp_path: Path) -> None:
    drill = Drill(tmp_path, service)
    holder, fields, gate = held_in_the_send(drill, "send_email", f"frozen-{tmp_path.name}")
    try:
        os.kill(holder.pid, signal.SIGSTOP)  # alive, frozen: never provably gone
        drill.advance(LEASE_PAST_MS)
        taken = drill.run(thread=drill.thread_id(), input=None, label="taker", **fields)
        assert taken["status"] == "parked", taken
        [detail] = taken["details"]
        assert "earlier holder of this thread (epoch 2) may still be running it" in detail
        assert "is gone" not in detail
        key = key_of(drill, "send_email")
        with pytest.raises(ControlError) as refused:
            drill.resolve(key, "assume_not_done")
        assert refused.value.code == "holder_may_be_running"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.communicate(timeout=60)
        service.client().open_gate(gate)
