"""Runs every shared conformance case as its own test (``test_case[<kind>/<name>]``); see
``runner.py`` for how each kind is run. Skips the module when the cases are not present."""

from __future__ import annotations

from collections.abc import Callable

import kinds  # noqa: F401 (registers the runners)
import pytest
from known_failures import KNOWN_FAILURES
from runner import Case, CaseSkipped, discover, run_case

from shared_data import CASES as CASES_DIR
from shared_data import skip_module_unless

skip_module_unless(CASES_DIR, "the conformance cases")

CASES = discover(CASES_DIR)
PARAMS = [
    pytest.param(
        case,
        id=case.case_id,
        marks=(
            [pytest.mark.xfail(strict=True, reason=f"known: {KNOWN_FAILURES[case.case_id]}")]
            if case.case_id in KNOWN_FAILURES
            else []
        ),
    )
    for case in CASES
]


def test_known_failures_name_existing_cases() -> None:
    """A stale entry would hide nothing and never shrink: every listed case must exist."""
    assert set(KNOWN_FAILURES) <= {case.case_id for case in CASES}


@pytest.mark.parametrize("case", PARAMS)
def test_case(case: Case, record_property: Callable[[str, object], None]) -> None:
    try:
        expected = run_case(case)
    except CaseSkipped as skipped:
        pytest.skip(str(skipped))
    for script in case.missing_scripts():
        record_property("partial", f"case.json names {script.split()[0]}, which is not vendored:"
                        " an unscripted fake stood in")
    if expected.source == "description":
        record_property("partial", "no expected file: only the error code (from the description)")
    elif expected.partial_state:
        record_property("partial", "older expected.json: only the state fields it has")
