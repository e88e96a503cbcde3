"""threads: AI-agent runs that survive crashes.

Every step a run takes is written to the thread's append-only, hash-chained log before the next
one starts; running the same thread again continues it; and a side effect that may already have
happened is never silently repeated: threads proves what happened, or parks and asks a person.
"""

from threads.clock import Clock, FakeClock, SystemClock
from threads.errors import ConfigError, LogError, NotFoundError, StoreError, ThreadsError
from threads.log.fold import EffectStatus, ParkKind, ThreadStatus
from threads.log.lines import Event
from threads.log.replay import Replayed, ReplayMismatch
from threads.models.protocol import Model, ModelCallError, ModelOutput, Price, TextDelta, Usage
from threads.principal import LOCAL_OPERATOR, Principal
from threads.run.agent import Agent, agent
from threads.run.budget import Budget
from threads.run.context_policy import ContextPolicy
from threads.run.hooks import (
    CompactedView,
    CompactView,
    Extension,
    HookDecision,
    SubagentStartView,
    SubagentStopView,
    ToolResultView,
)
from threads.run.permissions import Permissions
from threads.run.questions import ask_user
from threads.run.results import (
    BudgetExhausted,
    Cancelled,
    Completed,
    Failed,
    HandedOff,
    Parked,
    ParkReason,
    Pending,
    RunResult,
    RunStatus,
)
from threads.run.retry_policy import RetryPolicy
from threads.run.thread import ControlError, Resolution, Thread, open_thread
from threads.run.views import Child, ForkPoint, ThreadCost, ThreadState, ThreadUsage
from threads.run.waiting import PendingApproval
from threads.store.protocol import Store
from threads.store.sqlite import sqlite
from threads.tools.tool import (
    EffectClass,
    EffectUnknown,
    Found,
    LookupOutcome,
    LookupUnknown,
    NotFound,
    Reconcile,
    RunContext,
    Tool,
    tool,
)

__version__ = "0.1.0"

__all__ = [
    "LOCAL_OPERATOR",
    "Agent",
    "Budget",
    "BudgetExhausted",
    "Cancelled",
    "Child",
    "Clock",
    "CompactView",
    "CompactedView",
    "Completed",
    "ConfigError",
    "ContextPolicy",
    "ControlError",
    "EffectClass",
    "EffectStatus",
    "EffectUnknown",
    "Event",
    "Extension",
    "Failed",
    "FakeClock",
    "ForkPoint",
    "Found",
    "HandedOff",
    "HookDecision",
    "LogError",
    "LookupOutcome",
    "LookupUnknown",
    "Model",
    "ModelCallError",
    "ModelOutput",
    "NotFound",
    "NotFoundError",
    "ParkKind",
    "ParkReason",
    "Parked",
    "Pending",
    "PendingApproval",
    "Permissions",
    "Price",
    "Principal",
    "Reconcile",
    "ReplayMismatch",
    "Replayed",
    "Resolution",
    "RetryPolicy",
    "RunContext",
    "RunResult",
    "RunStatus",
    "Store",
    "StoreError",
    "SubagentStartView",
    "SubagentStopView",
    "SystemClock",
    "TextDelta",
    "Thread",
    "ThreadCost",
    "ThreadState",
    "ThreadStatus",
    "ThreadUsage",
    "ThreadsError",
    "Tool",
    "ToolResultView",
    "Usage",
    "__version__",
    "agent",
    "ask_user",
    "open_thread",
    "sqlite",
    "tool",
]
