"""Running a thread: the loop, recovery, settling, budgets, permissions, approvals, controls.

Front door: ``Agent`` (what to run, made by ``threads.agent``; the function is not lifted here,
as the package attribute ``agent`` stays the module), ``Thread``/``open_thread`` (the handle on one
thread: reads and the controls), the run's results (``Completed``, ``Parked``, ``Failed``, ...)
and the policies a thread pins (``Permissions``, ``Budget``, ``RetryPolicy``).

For a host that serves agents over HTTP (``threads.host`` imports nothing else of this package,
a test holds it to that): the runner (``start_run``, ``RunOptions``, ``CancelSignal``,
``RunStream``), opening a turn whose run starts after it is durable (``open_next_turn``,
``create_thread``, ``TurnRequest``, ``RunKey``), which threads have work and whose turn it is
(``agents_by_name``, ``has_work``, ``turn_principal``), how a recorded turn ending reads as a
result (``failed_code``), and the reads its listings, inbox and overview show
(``Listing``/``listing_of``/``read_listing``, ``Waiting``/``waiting_on``, ``explain``,
``gone_holders``, ``ThreadCost``, ``usage_of``, ``refusal``/``refusal_given``: the authority
rule). The loop's own modules (``runner``, ``loop``, ``model_step``, ``calls``, ``settle``, ...)
are drawn in ``docs/internals/architecture.md``.
"""

from threads.run.agent import Agent
from threads.run.authority import refusal, refusal_given
from threads.run.budget import Budget
from threads.run.fork import fork_at
from threads.run.holders import gone_holders
from threads.run.listing import Listing, listing_of, read_listing
from threads.run.park_info import explain
from threads.run.permissions import Permissions
from threads.run.questions import ask_user
from threads.run.results import (
    BudgetExhausted,
    Cancelled,
    Completed,
    ErrorInfo,
    Failed,
    Parked,
    Pending,
    RunResult,
)
from threads.run.retry_policy import RetryPolicy
from threads.run.runner import RunOptions, start_run
from threads.run.runtime import CancelSignal
from threads.run.streaming import RunStream
from threads.run.thread import ControlError, Thread, open_thread
from threads.run.turn import failed_code
from threads.run.turn_open import RunKey, TurnRequest, create_thread, open_next_turn
from threads.run.views import ThreadCost, usage_of
from threads.run.waiting import Waiting, waiting_on
from threads.run.worker import agents_by_name, has_work, tree_root, tree_work, turn_principal

__all__ = [
    "Agent",
    "Budget",
    "BudgetExhausted",
    "CancelSignal",
    "Cancelled",
    "Completed",
    "ControlError",
    "ErrorInfo",
    "Failed",
    "Listing",
    "Parked",
    "Pending",
    "Permissions",
    "RetryPolicy",
    "RunKey",
    "RunOptions",
    "RunResult",
    "RunStream",
    "Thread",
    "ThreadCost",
    "TurnRequest",
    "Waiting",
    "agents_by_name",
    "ask_user",
    "create_thread",
    "explain",
    "failed_code",
    "fork_at",
    "gone_holders",
    "has_work",
    "listing_of",
    "open_next_turn",
    "open_thread",
    "read_listing",
    "refusal",
    "refusal_given",
    "start_run",
    "tree_root",
    "tree_work",
    "turn_principal",
    "usage_of",
    "waiting_on",
]
