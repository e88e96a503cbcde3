"""The ``threads`` package has no import cycle: every ``import`` and ``from ... import`` inside
``src/threads`` is an edge (top-level, function-local and ``TYPE_CHECKING`` ones alike), and the
module graph they make must be acyclic. A cycle is reported as the chain of modules that closes it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import threads

PACKAGE_ROOT = Path(threads.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, name: str, *, is_package: bool, known: set[str]) -> set[str]:
    """The package modules that module ``name`` (with this ``source``) imports. ``from a.b import
    c`` names the module ``a.b.c`` when that is a module, else ``a.b``; relative imports resolve
    against the importing module's package."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE_ROOT.rglob("*.py"))
    known = {module_name(p) for p in paths}
    return {
        module_name(p): imported_modules(
            p.read_text(encoding="utf-8"),
            module_name(p),
            is_package=p.name == "__init__.py",
            known=known,
        )
        for p in paths
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None when the graph is acyclic (iterative DFS)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in sorted(graph):
        if state.get(root):
            continue
        path: list[str] = [root]
        stack = [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(child) == 1:
                return [*path[path.index(child) :], child]
            if not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append(iter(sorted(graph[child])))
    return None


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checker_sees_a_cycle_through_a_type_checking_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_type_checking_and_function_local_imports_are_edges() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from threads.run.loop import drive\n"
        "def f():\n    import threads.log.render\n"
        "from . import drafts\n"
    )
    known = {"threads.run.loop", "threads.log.render", "threads.run.drafts", "threads.run.x"}
    edges = imported_modules(source, "threads.run.x", is_package=False, known=known)
    assert edges == {"threads.run.loop", "threads.log.render", "threads.run.drafts"}


def test_no_package_attribute_hides_a_submodule() -> None:
    """A package's ``__init__`` never lifts a name its submodule also has (``threads.log`` once
    exported the function ``reduce``, so ``from threads.log import reduce`` gave the function,
    not the module ``threads.log.reduce``)."""
    import importlib
    import pkgutil
    import types

    hidden = []
    packages = ["threads"] + [
        info.name for info in pkgutil.walk_packages(threads.__path__, "threads.") if info.ispkg
    ]
    for name in packages:
        try:
            package = importlib.import_module(name)
        except ImportError:  # a package that needs an extra this environment lacks
            continue
        for sub in pkgutil.iter_modules(package.__path__):
            if sub.name == "__main__":
                continue
            try:
                importlib.import_module(f"{name}.{sub.name}")
            except ImportError:
                continue
            if not isinstance(getattr(package, sub.name), types.ModuleType):
                hidden.append(f"{name}.{sub.name}")
    assert hidden == []
