"""Running a thread: the loop, recovery, settling, budgets, permissions, approvals, controls.

Front door: ``Agent`` (what to run, made by ``threads.agent``; the function is not lifted here,
as the package attribute ``agent`` stays the module), ``Thread``/``open_thread`` (the handle on one
thread: reads and the controls), the run's results (``Completed``, ``Parked``, ``Failed``, ...)
and the policies a thread pins (``Permissions``, ``Budget``, ``RetryPolicy``). The loop's own
modules (``runner``, ``loop``, ``model_step``, ``calls``, ``settle``, ...) are drawn in
``docs/internals/architecture.md``.
"""

from threads.run.agent import Agent
from threads.run.budget import Budget
from threads.run.permissions import Permissions
from threads.run.questions import ask_user
from threads.run.results import (
    BudgetExhausted,
    Cancelled,
    Completed,
    Failed,
    Parked,
    Pending,
    RunResult,
)
from threads.run.retry_policy import RetryPolicy
from threads.run.thread import ControlError, Thread, open_thread

__all__ = [
    "Agent",
    "Budget",
    "BudgetExhausted",
    "Cancelled",
    "Completed",
    "ControlError",
    "Failed",
    "Parked",
    "Pending",
    "Permissions",
    "RetryPolicy",
    "RunResult",
    "Thread",
    "ask_user",
    "open_thread",
]
