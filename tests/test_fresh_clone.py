"""The README's test command passes on a clone that has no ``../shared`` beside it.

A copy of the repository (what a commit would hold: ``.gitignore``d files left out) is made in a
directory with no ``shared`` sibling; there the whole suite must collect without an error, and
every test module that reads the shared conformance data (one importing ``shared_data``, or
importing a test module that does) must pass, skipping what needs the data. Only those modules
run, not the whole suite again: a test that reads the data without asking ``shared_data`` is
what breaks a clone, and the static check below refuses that. The copy runs its own ``src``.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
LOOKUP = TESTS / "shared_data.py"
# What only the lookup may say: the data's directory name and the variable that moves it.
TELLTALES = ("shared", "shared/conformance", "THREADS_CONFORMANCE_DIR")


def _test_sources() -> dict[str, Path]:
    """Every Python file of the suite by module name (pytest imports them by file name)."""
    return {p.stem: p for p in sorted(TESTS.rglob("*.py")) if "__pycache__" not in p.parts}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def modules_reading_shared_data() -> list[Path]:
    """The test modules that import ``shared_data``, directly or through other test modules."""
    sources = _test_sources()
    local = {name: _imports(path) & set(sources) for name, path in sources.items()}
    reading = {LOOKUP.stem}
    grew = True
    while grew:
        more = {name for name, uses in local.items() if uses & reading} - reading
        reading |= more
        grew = bool(more)
    return [
        sources[name] for name in sorted(reading)
        if name.startswith("test_") and sources[name] != Path(__file__).resolve()
    ]


def _telltale(node: ast.AST) -> bool:
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        return False
    return node.value == TELLTALES[0] or any(t in node.value for t in TELLTALES[1:])


def test_only_the_lookup_knows_where_the_shared_data_is() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
        for path in _test_sources().values()
        if path not in (LOOKUP, Path(__file__).resolve())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _telltale(node)
    ]
    assert offenders == [], "find the shared data through shared_data (tests/shared_data.py)"
    assert len(modules_reading_shared_data()) >= 5  # the schema, layout, deltas, logs, cases


def _ignored_names() -> list[str]:
    """``.gitignore``'s patterns as names ``shutil.ignore_patterns`` matches, and ``.git``."""
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip().rstrip("/").split("/")[-1] for line in lines]
    return [".git", *(p for p in patterns if p and not p.startswith("#"))]


def _clone(into: Path) -> Path:
    copy = into / "threads"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(*_ignored_names()), symlinks=True)
    assert not (copy.parent / "shared").exists()
    return copy


def _pytest(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("THREADS_CONFORMANCE_DIR", None)
    env["PYTHONPATH"] = str(copy / "src")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args], cwd=copy, env=env,
        capture_output=True, text=True, timeout=540, check=False,
    )


@pytest.mark.timeout(600)
def test_a_clone_without_shared_collects_and_skips_what_it_lacks(tmp_path: Path) -> None:
    copy = _clone(tmp_path)
    collected = _pytest(copy, "--collect-only")
    assert collected.returncode == 0, collected.stdout[-4000:] + collected.stderr[-2000:]

    modules = [str(p.relative_to(REPO)) for p in modules_reading_shared_data()]
    assert modules  # (none would run the whole suite again)
    ran = _pytest(copy, *modules)
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    assert " failed" not in ran.stdout, ran.stdout[-6000:]
    assert " error" not in ran.stdout, ran.stdout[-6000:]
    assert "shared conformance data, which a clone without ../shared lacks" in ran.stdout
