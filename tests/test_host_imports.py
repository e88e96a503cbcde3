"""``threads.host`` reaches the run layer through its front door only: every import a host
module makes from ``threads.run`` names the package itself (never one of its modules), and
only names ``threads.run.__all__`` offers. The set of names the host uses is pinned here, so a
new reach into the loop shows up in review as a change to this list (and to the front door)."""

from __future__ import annotations

import ast
from pathlib import Path

import threads.host
import threads.run

HOST_ROOT = Path(threads.host.__file__).parent

# What the host takes from threads.run: the handle, the runner, opening a turn, the worker's
# view of which threads have work (a subagent's through its tree's root), and the reads its
# pages show.
ALLOWED = frozenset({
    "Agent", "Budget", "CancelSignal", "ErrorInfo", "Failed", "Listing", "Permissions",
    "RunKey", "RunOptions", "RunStream", "Thread", "ThreadCost", "TurnRequest", "Waiting",
    "agents_by_name", "create_thread", "explain", "failed_code", "fork_at", "gone_holders",
    "has_work", "listing_of", "open_next_turn", "read_listing", "refusal", "refusal_given",
    "start_run", "tree_root", "tree_work", "turn_principal", "usage_of", "waiting_on",
})


def run_imports(source: str) -> tuple[set[str], list[str]]:
    """The names a module imports from ``threads.run``, and every import that reaches past it
    (``threads.run.x``, in any spelling: ``from``, plain ``import``, function-local)."""
    names: set[str] = set()
    past: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "threads.run":
                names.update(alias.name for alias in node.names)
            elif node.module.startswith("threads.run."):
                past.append(node.module)
        elif isinstance(node, ast.Import):
            past.extend(a.name for a in node.names if a.name.startswith("threads.run"))
    return names, past


def test_the_host_imports_only_the_run_front_door() -> None:
    used: set[str] = set()
    past: list[str] = []
    for path in sorted(HOST_ROOT.rglob("*.py")):
        names, reached = run_imports(path.read_text(encoding="utf-8"))
        used |= names
        past += [f"{path.relative_to(HOST_ROOT)}: {module}" for module in reached]
    assert past == [], "host modules import the loop's internals: " + ", ".join(past)
    assert used <= set(threads.run.__all__), sorted(used - set(threads.run.__all__))
    assert used == ALLOWED, (sorted(used - ALLOWED), sorted(ALLOWED - used))


def test_the_checker_sees_every_spelling_of_a_reach_past_the_door() -> None:
    source = (
        "from threads.run import Thread\n"
        "from threads.run.loop import drive\n"
        "import threads.run.writer\n"
        "def f():\n    from threads.run.pinning import changes\n"
    )
    names, past = run_imports(source)
    assert names == {"Thread"}
    assert sorted(past) == ["threads.run.loop", "threads.run.pinning", "threads.run.writer"]
