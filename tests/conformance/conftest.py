"""Per-kind conformance totals, printed at the end of the session:
``conformance <kind>: N passed, N failed, N skipped`` (known failures, run as strict xfail, are
counted as failed and named ``known``), then the summary line
``conformance: N passed, N failed, N skipped`` over every kind, plus which passes compared a
partial expectation (no expected file, or an expected.json older than the fields we now
compute)."""

from __future__ import annotations

from collections import Counter

import pytest

_TEST = "test_conformance.py::test_case["
_results: dict[str, Counter[str]] = {}
_partial: dict[str, list[str]] = {}


def _case_id(nodeid: str) -> str | None:
    if _TEST not in nodeid:
        return None
    return nodeid.split(_TEST, 1)[1].rstrip("]")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    case_id = _case_id(report.nodeid)
    if case_id is None:
        return
    kind = case_id.split("/", 1)[0]
    counts = _results.setdefault(kind, Counter())
    if hasattr(report, "wasxfail") and report.skipped:
        counts["failed"] += 1
        counts["known"] += 1
    elif report.skipped:
        counts["skipped"] += 1
    elif report.failed:
        counts["failed"] += 1
    elif report.when == "call":
        counts["passed"] += 1
        for key, why in report.user_properties:
            if key == "partial":
                _partial.setdefault(str(why), []).append(case_id)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _results:
        return
    total: Counter[str] = Counter()
    for kind, counts in sorted(_results.items()):
        total.update(counts)
        known = f" ({counts['known']} known)" if counts["known"] else ""
        terminalreporter.write_line(
            f"conformance {kind}: {counts['passed']} passed, {counts['failed']} failed{known}, "
            f"{counts['skipped']} skipped"
        )
    for why, case_ids in sorted(_partial.items()):
        terminalreporter.write_line(
            f"conformance partial comparison, {why}: {len(case_ids)} passed case(s): "
            + ", ".join(case_ids)
        )
    terminalreporter.write_line(
        f"conformance: {total['passed']} passed, {total['failed']} failed, "
        f"{total['skipped']} skipped"
    )
