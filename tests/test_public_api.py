"""The curated public surface: ``threads.__all__`` is pinned, every name in it exists, and
``import threads`` works with every optional extra missing."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import threads
import threads.testing

PUBLIC = {
    "EffectClass",
    "EffectStatus",
    "Child",
    "ForkPoint",
    "ParkKind",
    "ParkReason",
    "Resolution",
    "RunStatus",
    "ThreadCost",
    "ThreadState",
    "ThreadStatus",
    "ThreadUsage",
    "LOCAL_OPERATOR",
    "Agent",
    "Budget",
    "BudgetExhausted",
    "Cancelled",
    "Clock",
    "Completed",
    "ContextPolicy",
    "ConfigError",
    "ControlError",
    "EffectUnknown",
    "Event",
    "Extension",
    "Failed",
    "FakeClock",
    "Found",
    "HandedOff",
    "HookDecision",
    "CompactView",
    "CompactedView",
    "SubagentStartView",
    "SubagentStopView",
    "ToolResultView",
    "LogError",
    "LookupOutcome",
    "LookupUnknown",
    "Model",
    "ModelCallError",
    "ModelOutput",
    "NotFound",
    "NotFoundError",
    "Parked",
    "Pending",
    "PendingApproval",
    "Permissions",
    "Price",
    "Principal",
    "Reconcile",
    "ReplayMismatch",
    "Replayed",
    "RetryPolicy",
    "RunContext",
    "RunResult",
    "Store",
    "StoreError",
    "SystemClock",
    "TextDelta",
    "Thread",
    "ThreadsError",
    "Tool",
    "Usage",
    "__version__",
    "agent",
    "ask_user",
    "open_thread",
    "sqlite",
    "tool",
}


def test_all_is_pinned_and_complete() -> None:
    assert set(threads.__all__) == PUBLIC
    for name in threads.__all__:
        assert hasattr(threads, name), name


def test_import_works_without_any_extra() -> None:
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'openai', 'anthropic', 'litellm', 'psycopg',"
        " 'psycopg_pool', 'httpx2', 'mcp', 'mcp_types'}:\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import threads, threads.openai, threads.anthropic, threads.litellm, threads.mcp\n"
        "print(threads.__version__)\n"
    )
    assert _python(blocker) == "0.1.0"


def test_mcp_without_its_extra_names_the_extra() -> None:
    blocker = (
        "import sys, importlib.util\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'mcp' else real(name, *a)\n"
        "from threads.mcp import mcp\n"
        "try:\n"
        "    mcp(name='x', command='x')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert "pip install 'threads[mcp]'" in _python(blocker)


def _python(code: str) -> str:
    """What ``python -c code`` prints, in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.strip()


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(target, attr):
                return False
            target = getattr(target, attr)
        return True
    return False


def test_setup_errors_name_things_that_exist() -> None:
    import re

    import pytest

    with pytest.raises(threads.ConfigError) as bad_model:
        threads.agent(name="a", model=object())  # type: ignore[arg-type]
    with pytest.raises(threads.ConfigError) as bad_tool:
        threads.agent(name="a", model=threads.testing.scripted_model([]), tools=[object()])  # type: ignore[list-item]
    names = re.findall(r"threads(?:\.\w+)+", bad_model.value.message + bad_tool.value.message)
    assert "threads.testing.scripted_model" in names
    assert [n for n in names if not _resolves(n)] == []


def _package_modules() -> list[ModuleType]:
    """Every importable module of the package (an adapter whose extra is missing is left out;
    ``__main__`` modules run a command when imported)."""
    modules = []
    for info in pkgutil.walk_packages(threads.__path__, "threads."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:
            continue
    return modules


def _is_exception(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseException)


def test_an_exported_error_name_means_one_class_everywhere() -> None:
    """Where a module of the package defines something under a name ``threads`` exports and
    either is an exception class, both are the same class: the reconcile lookup's ``NotFound``
    outcome and the ``not_found`` error once shared a name, so ``except NotFound`` around an
    unknown thread id raised ``TypeError``. (The HTTP bodies name their wire forms of the same
    things alike, ``ForkPoint``, ``PendingApproval``: values both, one meaning.)"""
    clashes = [
        f"{module.__name__}.{name}"
        for module in _package_modules()
        for name in threads.__all__
        if (obj := getattr(module, name, None)) is not None
        and getattr(obj, "__module__", None) == module.__name__
        and obj is not (public := getattr(threads, name))
        and (_is_exception(obj) or _is_exception(public))
    ]
    assert clashes == []


async def test_an_unknown_thread_id_is_not_found_error(tmp_path: Path) -> None:
    """``open_thread`` on an id the store lacks raises ``NotFoundError`` (code ``not_found``),
    catchable as such; ``NotFound`` is the lookup outcome, a value and never an exception."""
    import pytest

    store = threads.sqlite(tmp_path / "store")
    try:
        with pytest.raises(threads.NotFoundError) as raised:
            await threads.open_thread(store, "0192a000-0000-7000-8000-00000000dead")
    finally:
        await store.close()
    assert isinstance(raised.value, threads.ThreadsError)
    assert raised.value.code == "not_found"
    assert "0192a000-0000-7000-8000-00000000dead" in raised.value.message
    assert not issubclass(threads.NotFound, BaseException)
    assert isinstance(threads.NotFound(), threads.NotFound)  # what a lookup returns


def test_every_exported_error_is_in_one_tree() -> None:
    """Every exception class ``threads`` exports derives from ``ThreadsError`` (so ``except
    ThreadsError`` catches whatever threads raises on purpose), and ``errors.py``'s docstring
    draws each of them. ``ModelCallError`` was once a bare ``Exception``. ``EffectUnknown`` is
    not threads': a tool raises it to tell threads, and the docstring says so."""
    exported = [
        obj
        for name in threads.__all__
        if _is_exception(obj := getattr(threads, name)) and obj is not threads.EffectUnknown
    ]
    assert threads.ModelCallError in exported
    assert [e.__name__ for e in exported if not issubclass(e, threads.ThreadsError)] == []
    drawn = threads.errors.__doc__ or ""
    assert [e.__name__ for e in exported if f"── {e.__name__} " not in drawn] == ["ThreadsError"]


def test_a_model_call_error_without_a_code_is_not_terminal() -> None:
    """A model failure given no code reads ``model_error`` and is not terminal (the loop
    resends an attempt in doubt); one given a code keeps it and ends the turn."""
    in_doubt = threads.ModelCallError("cut", reason="stream_broken", provider_outcome="unknown")
    assert (in_doubt.code, in_doubt.terminal, in_doubt.message) == ("model_error", False, "cut")
    full = threads.ModelCallError(
        "too long", reason="provider_error", provider_outcome="failed", code="context_exhausted"
    )
    assert (full.code, full.terminal) == ("context_exhausted", True)
