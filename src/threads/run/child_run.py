"""``ChildRun``: what a parent's run hands the runner to run one subagent thread, and the
signature of the function that does it (``StartChild``).

The spawn path (``threads.run.spawn``) decides and records; the runner (``threads.run.runner``)
creates the child's branch and runs it. They meet through this value, handed over in the
``Runtime``, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from threads.log.event_types import Principal as WirePrincipal
from threads.log.vocabulary import ThreadStartedDataParent
from threads.principal import Principal
from threads.run.budget import AncestorBudget
from threads.run.config import AgentSpec
from threads.run.permissions import Permissions
from threads.run.results import RunResult
from threads.sandbox.binding import RunSandbox


@dataclass(frozen=True, slots=True)
class ChildRun:
    """One run of the child thread ``thread_id``: created (header, ``thread_started`` with
    ``parent``, the prompt as ``user_input{source: parent_agent}``) when it does not exist yet,
    then run with no new input under the parent run's principal. ``ceiling``: the parent's
    permissions in force, so each of the child's calls is decided under both (the stricter
    wins). ``cancelled_by``: set when the parent's turn is cancelled; an existing child is then
    barred (``cancel_requested{scope: tree}``) before it runs. ``sandbox``: the parent's sandbox,
    when the child shares it (lent to the child's run), else None (the child's agent's own)."""

    spec: AgentSpec
    thread_id: str
    parent: ThreadStartedDataParent
    prompt: str
    principal: Principal
    deps: Any
    ceiling: Permissions
    # the principal of the parent's cancel barrier: the child is barred (scope tree) first
    cancelled_by: WirePrincipal | None = None
    ancestors: tuple[AncestorBudget, ...] = ()  # every budget above the child, and its spend
    sandbox: RunSandbox | None = None
    # the reasons the parent's ``subagent_stop`` hooks sent it back with (one not yet given
    # is this run's input: ``threads.run.subagent_hooks``)
    continuations: tuple[str, ...] = ()


StartChild = Callable[[ChildRun], Awaitable[RunResult]]


def shares_sandbox(isolation: str, parent_provider: str | None, child_provider: str | None) -> bool:
    """Whether a child works in its parent's sandbox: both agents have one, and the spawn asked
    for ``shared_sandbox``, or for ``none`` with both of the same provider."""
    if parent_provider is None or child_provider is None:
        return False
    return isolation == "shared_sandbox" or parent_provider == child_provider
