"""Runs every shared conformance case as its own test (``test_case[<kind>/<name>]``); see
``runner.py`` for how each kind is run. Skips the module when the cases are not present."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fork import run_fork
from recover import run_recover
from runner import KIND_RUNNERS, Case, CaseSkipped, cases_dir, discover, run_case

KIND_RUNNERS["recover"] = run_recover
KIND_RUNNERS["fork"] = run_fork

CASES_DIR = cases_dir()
if not CASES_DIR.is_dir():
    pytest.skip(
        f"conformance cases not found at {CASES_DIR} (set THREADS_CONFORMANCE_DIR)",
        allow_module_level=True,
    )

CASES = discover(CASES_DIR)


@pytest.mark.parametrize("case", CASES, ids=[c.case_id for c in CASES])
def test_case(case: Case, record_property: Callable[[str, object], None]) -> None:
    try:
        expected = run_case(case)
    except CaseSkipped as skipped:
        pytest.skip(str(skipped))
    if expected.source == "description":
        record_property("partial", "no expected file: only the error code (from the description)")
    elif expected.partial_state:
        record_property("partial", "older expected.json: only the state fields it has")
