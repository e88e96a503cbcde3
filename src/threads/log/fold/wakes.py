"""Background wakes as the reader judges them: ``woken`` (rules 32 and 45).

A ``woken`` opens a turn for results of background subagents that ended while no turn was open.
The reader checks that it names, exactly and once, the late results recorded just before it
(nothing but ``agent_finished`` and those results between the first cause and the ``woken``),
each the late result of a background ``agent_spawned``, all spawned by one run (one principal and
one root request), that no thread or tree cancel followed any of those spawns, that no turn of
that run ended other than ``end_turn``, and that the ``woken`` actor's principal is that run's.
``Wakes`` keeps what these checks need from earlier events: which run opened each turn, which run
spawned each call, runs that ended badly, and the last thread-wide cancel.
Invariant: a pure function of the events it was given (no I/O); a broken rule raises
``LogError(invalid_transition)`` at the ``woken``'s seq.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from threads.errors import LogError
from threads.log.event_types import Principal
from threads.log.lines import Event
from threads.log.vocabulary import data_of

_BETWEEN = frozenset({"agent_finished", "tool_result_late"})


@dataclass(frozen=True, slots=True, eq=False)
class RunRef:
    """A run as wakes know it: the principal of its opener and the id of its root request."""

    principal: Principal | None
    root: str


@dataclass(frozen=True, slots=True)
class Spawn:
    run: RunRef
    seq: int
    background: bool


@dataclass(slots=True)
class Wakes:
    runs: dict[str, RunRef] = field(default_factory=dict)  # turn opener event_id -> its run
    spawns: dict[str, Spawn] = field(default_factory=dict)  # call_id -> the spawn it made
    ended_badly: set[str] = field(default_factory=set)  # roots with a turn not ended end_turn
    woken: set[str] = field(default_factory=set)  # late-result ids a woken already named
    cancel_seq: int = 0  # seq of the last thread or tree cancel_requested

    def opened(self, opener: Event) -> None:
        """A turn opened by ``user_input`` (or another opener that starts its own run)."""
        self.runs[opener.event_id] = RunRef(_principal(opener), opener.event_id)

    def spawned(self, event: Event, opener: Event | None) -> None:
        run = self.runs.get(opener.event_id) if opener is not None else None
        if run is not None:
            data = data_of(event, "agent_spawned")
            self.spawns[data["call_id"]] = Spawn(run, event.seq, data["mode"] == "background")

    def turn_ended(self, event: Event, opener: Event) -> None:
        run = self.runs.get(opener.event_id)
        if run is not None and data_of(event, "turn_completed")["reason"] != "end_turn":
            self.ended_badly.add(run.root)

    def cancel_requested(self, event: Event) -> None:
        if data_of(event, "cancel_requested")["scope"] in ("thread", "tree"):
            self.cancel_seq = event.seq

    def check_woken(
        self, event: Event, events: Sequence[Event], by_id: Callable[[str], Event | None],
        barred: str | None,
    ) -> None:
        """Rules 32 and 45 for ``event`` (a ``woken``), given the events before it. ``barred``
        says why the thread takes no new turn (cancelled, handed off), if it doesn't."""
        if barred is not None:
            raise _fail(event, f"woken on a thread that is {barred}")
        causes = data_of(event, "woken")["causes"]
        if len(set(causes)) != len(causes):
            raise _fail(event, "woken names a cause twice")
        lates = [by_id(cause) for cause in causes]
        for cause, late in zip(causes, lates, strict=True):
            if late is None or late.type != "tool_result_late":
                raise _fail(event, f"woken names {cause!r}, which is not a tool_result_late")
            if cause in self.woken:
                raise _fail(event, f"woken names {cause!r}, which an earlier woken named")
        _check_contiguous(event, events, set(causes), min(late.seq for late in lates if late))
        run = self._one_run(event, [late for late in lates if late is not None])
        if _principal(event) != run.principal:
            raise _fail(event, "woken's principal is not the principal of the run that spawned "
                        "its causes (rule 45)")
        self.woken.update(causes)
        self.runs[event.event_id] = run

    def _one_run(self, event: Event, lates: list[Event]) -> RunRef:
        runs: dict[str, RunRef] = {}
        for late in lates:
            call_id = data_of(late, "tool_result_late")["call_id"]
            spawn = self.spawns.get(call_id)
            if spawn is None or not spawn.background:
                raise _fail(event, f"woken names the late result of {call_id!r}, "
                            "which is no background spawn_agent")
            if self.cancel_seq > spawn.seq:
                raise _fail(event, "woken after a thread or tree cancel that followed a cause's "
                            "spawn")
            runs[spawn.run.root] = spawn.run
        if len(runs) != 1:
            raise _fail(event, "woken names results of children spawned by different runs")
        (run,) = runs.values()
        if run.root in self.ended_badly:
            raise _fail(event, "woken for a run with a turn that ended other than end_turn")
        return run


def _check_contiguous(event: Event, events: Sequence[Event], causes: set[str], first: int) -> None:
    """Between the first cause and the ``woken``: only ``agent_finished`` and late results, and
    every late result there is a cause."""
    for earlier in reversed(events):
        if earlier.seq < first:
            break
        if earlier.type not in _BETWEEN:
            raise _fail(event, f"woken's causes are not the results recorded just before it "
                        f"({earlier.type} at seq {earlier.seq} is between them)")
        if earlier.type == "tool_result_late" and earlier.event_id not in causes:
            raise _fail(event, f"woken leaves out the late result at seq {earlier.seq}")


def _principal(event: Event) -> Principal | None:
    return event.actor.get("principal")


def _fail(event: Event, message: str) -> LogError:
    return LogError("invalid_transition", message, seq=event.seq)
