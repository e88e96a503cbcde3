"""The zombie window: whether an earlier holder of the thread's lease may still be sending a
call's effect.

A holder frozen inside a tool (SIGSTOP, a blocking call that starves lease renewal) loses its
lease and is taken over, yet a request it had already passed its fence check with can still
reach the provider when it wakes. The takeover time bounds the taken-over lease's expiry (a
lease can only be taken once it expired): it is the time of the first event a later epoch wrote
after the call's last ``effect_begin`` (or, for the run doing the takeover, when it acquired the
lease). From the takeover plus the tool's ``settle_ms`` on, no earlier holder can still be
sending. Until then a ``final`` not-found is not trusted (the call parks, and a later run looks
again once the window is over) and an operator's ``assume_not_done`` is refused.

A holder proven dead on this host (``threads.store.holder.gone_epochs``: its process is gone)
sends nothing, so it has no window: the proof is acted on at once. A holder alive, frozen
(SIGSTOP) or on another host can't be proven gone, and its window stands.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from threads.log.fold import Call, Fold
from threads.log.vocabulary import data_of
from threads.store.holder import gone_epochs
from threads.store.protocol import Store
from threads.tools.tool import Tool


@dataclass(frozen=True, slots=True)
class EarlierHolder:
    """The holder (``epoch``) that last dispatched the call, and when it can no longer be
    sending (``until``, epoch ms); ``gone``: its process is proven dead, so it sends nothing
    now (whatever ``until`` says)."""

    epoch: int
    until: int
    gone: bool = False

    def may_send(self, now: int) -> bool:
        return not self.gone and now < self.until

    def describe(self) -> str:
        if self.gone:
            return (
                f"the earlier holder of this thread (epoch {self.epoch}) is gone: its process"
                " no longer runs on this host, so it sends nothing more"
            )
        return f"an earlier holder of this thread (epoch {self.epoch}) may still be running it"


def earlier_holder(
    fold: Fold,
    call: Call,
    settle_ms: int,
    *,
    current_epoch: int | None = None,
    taken_over_at: int | None = None,
    gone: frozenset[int] = frozenset(),
) -> EarlierHolder | None:
    """The earlier holder that last dispatched ``call`` and the end of its window, or None when
    no earlier holder is involved: the call was never dispatched, or last dispatched at
    ``current_epoch`` (by the asking holder itself), or (read from the log alone, without
    ``taken_over_at``) no later epoch wrote after it, so the holder that dispatched it settled
    it itself. ``taken_over_at``: when the asking holder took the lease. ``gone``: the epochs
    whose holders are proven dead (``threads.store.holder.gone_epochs``)."""
    begin = call.begin_event
    if begin is None or (current_epoch is not None and begin.epoch >= current_epoch):
        return None
    later = next((e for e in fold.events if e.seq > begin.seq and e.epoch > begin.epoch), None)
    if later is not None:
        return EarlierHolder(begin.epoch, later.time + settle_ms, begin.epoch in gone)
    if taken_over_at is None:
        return None
    return EarlierHolder(begin.epoch, taken_over_at + settle_ms, begin.epoch in gone)


async def gone_holders(store: Store, branch_id: str) -> frozenset[int]:
    """The epochs of ``branch_id`` whose holders are proven dead, as its lease row says now."""
    state = await store.read_lease(branch_id)
    return frozenset() if state is None else gone_epochs(state.holder_id, state.epoch)


def window_park_ends(
    fold: Fold, call: Call, tool: Tool | None, gone: frozenset[int] = frozenset()
) -> int | None:
    """When the park of ``call`` stops standing, if the zombie window made it (a ``final``
    not-found while an earlier holder could still be sending): the end of that window, or the
    park's own time once that holder is proven gone (it ends at once). None for any other
    park: a person decides those."""
    if (
        call.effect != "unknown"
        or call.effect_class != "reconcilable"
        or tool is None
        or tool.reconcile is None
        or tool.reconcile.finality != "final"
    ):
        return None
    holder = earlier_holder(fold, call, tool.settle_ms, gone=gone)
    address = {"id": call.effect_key, "kind": "effect"}
    park = next(
        (e for e in reversed(fold.events)
         if e.type == "parked" and data_of(e, "parked")["address"] == address),
        None,
    )
    if holder is None or park is None or park.time >= holder.until:
        return None
    return park.time if holder.gone else holder.until


def iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )
