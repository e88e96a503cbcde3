"""Where the tests find the shared conformance data, and how a test that needs it skips.

The reference's test vectors live beside the repository, in ``../shared/conformance`` (or the
cases directory ``$THREADS_CONFORMANCE_DIR`` names); a fresh clone has none of it. A test that
reads it is marked ``needs(path, what)`` (or calls ``skip_module_unless``), so without the data it
skips and says which data it lacked and where it looked; with it (CI) it runs.

Invariant: this is the only module of the suite that knows where the shared data lives
(``tests/test_fresh_clone.py`` checks that, and runs the suite's collection and every module
that reads the data from a copy of the repository without ``../shared``). It is importable from
every test directory as ``shared_data``: pytest puts ``tests/`` on ``sys.path`` for the
``conftest.py`` there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CASES_ENV = "THREADS_CONFORMANCE_DIR"

CASES = Path(os.environ.get(CASES_ENV) or REPO.parent / "shared" / "conformance" / "cases")
"""The conformance cases, one directory per case (``<name>/case.json`` and its files)."""

SCHEMA = CASES.parent / "events.v1.schema.json"
"""The shared JSON Schema of log lines (the one ``threads.log`` vendors without annotations)."""

TS_LOGS = sorted(CASES.glob("*/log.threads-ts.jsonl"))
"""The logs threads-ts itself wrote for the cases, byte for byte."""


def missing(path: Path, what: str) -> str:
    """The skip reason of a test that needs ``what`` at ``path``."""
    return (
        f"needs {what} (not at {path}): shared conformance data, which a clone without ../shared"
        f" lacks (or set ${CASES_ENV} to its cases directory)"
    )


def needs(path: Path, what: str) -> pytest.MarkDecorator:
    """Skip the marked test when ``path`` does not exist, saying which data it needed."""
    return pytest.mark.skipif(not path.exists(), reason=missing(path, what))


def needs_ts_logs() -> pytest.MarkDecorator:
    """Skip the marked test when no case carries a log threads-ts wrote."""
    return pytest.mark.skipif(
        not TS_LOGS, reason=missing(CASES / "*" / "log.threads-ts.jsonl", "the threads-ts logs")
    )


def skip_module_unless(path: Path, what: str) -> None:
    """At a module's top: skip the whole module when ``path`` does not exist."""
    if not path.exists():
        pytest.skip(missing(path, what), allow_module_level=True)
