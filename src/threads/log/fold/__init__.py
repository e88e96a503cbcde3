"""The fold: a branch's events folded, rule by rule, into the state the run loop, recovery and
every reader decide from.

Front door: ``Fold`` (the incremental state, ``state``) and ``reduce`` (one root branch folded),
with the records it keeps per call, approval, model attempt and turn (``records``). Below them:
the core rule of each event type (``rules``), the reader rules for features other writers record
(``features``: subagents, handoffs, modes, settings, structured output, compaction), the
compaction ranges (``compaction``), questions and answers (``questions``), wakes (``wakes``),
spend (``cost``: the one copy the projection and the budget check share) and the saved-fold
format snapshots use (``saved``).
"""

from threads.log.fold.records import (
    Approval,
    Call,
    EffectStatus,
    ModelAttempt,
    ParkKind,
    ThreadStatus,
    Turn,
)
from threads.log.fold.rules import Fold, reduce
from threads.log.fold.state import FoldState

__all__ = [
    "Approval",
    "Call",
    "EffectStatus",
    "Fold",
    "FoldState",
    "ModelAttempt",
    "ParkKind",
    "ThreadStatus",
    "Turn",
    "reduce",
]
