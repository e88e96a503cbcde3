"""The generic conformance runner: discovers the shared cases and runs each by its kind.

The cases live where ``shared_data.CASES`` says. ``KIND_RUNNERS`` maps a case kind to the
function that runs it; a kind with no runner yet, and the cases NOTICE.md lists as data
mismatches, raise ``CaseSkipped`` with the reason. Invariant: a case passes only when every
field its expected file pins matches, and before a case runs, ``fields.check_fields`` fails it
(``unsupported field X``) when any document of it uses a field its kind's runner does not act
on: no part of a case's script is ever skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fields import check_fields

from threads.errors import WIRE_CODES, LogError
from threads.log.verify import verify_export

# NOTICE.md: these logs predate a schema change (fork reason snapshot now also needs
# knowledge_policy), so the schema refuses line 14 before the case's own error is reachable.
KNOWN_DATA_MISMATCHES: dict[str, str] = dict.fromkeys(
    ("reduce-child-branch", "fork-at-hash-mismatch", "event-branch-id-mismatch"),
    "known data mismatch (NOTICE.md): the log's fork line predates the schema's "
    "knowledge_policy requirement, so the current schema refuses it first",
)

# Cases that ship no expected file and whose description names two codes (the rule, then the
# case): the case is the "missing or non-integer version" branch, which is invalid_line.
DESCRIPTION_CODES: dict[str, str] = dict.fromkeys(
    (
        "header-format-version-missing", "header-format-version-string",
        "header-format-version-fraction", "head-format-version-missing",
        "head-format-version-string",
    ),
    "invalid_line",
)

_CODE_AFTER_COLON = re.compile(r": ([a-z_]+)\b")


class CaseSkipped(Exception):
    """The case cannot run here; ``str(exc)`` says why."""


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    path: Path
    spec: dict[str, Any]

    @property
    def case_id(self) -> str:
        return f"{self.kind}/{self.name}"

    def log_path(self) -> Path:
        """NOTICE.md: the threads-py variant when present, else the neutral log."""
        py = self.path / "log.threads-py.jsonl"
        return py if py.exists() else self.path / "log.jsonl"

    def missing_scripts(self) -> list[str]:
        """Scripts ``case.json`` names that the vendored case does not ship: the runner lets an
        unscripted fake stand in (or skips the case when that can't answer), and says so."""
        return [f"{key} {self.spec[key]}" for key in ("model_script", "sandbox_script")
                if key in self.spec and not (self.path / self.spec[key]).exists()]

    def expected_path(self) -> Path | None:
        for name in ("expected.threads-py.json", "expected.json"):
            if (self.path / name).exists():
                return self.path / name
        return None


@dataclass(frozen=True)
class Expected:
    """What a case pins. ``source`` is ``file`` or ``description`` (no expected file shipped:
    only the error code is pinned, never its seq)."""

    doc: dict[str, Any]
    source: str

    @property
    def partial_state(self) -> bool:
        """An older expected.json written before usage.unknown_responses was pinned."""
        usage = (self.doc.get("state") or {}).get("usage")
        return usage is not None and "unknown_responses" not in usage


def discover(root: Path) -> list[Case]:
    cases = []
    for case_json in sorted(root.glob("*/case.json")):
        spec = json.loads(case_json.read_text(encoding="utf-8"))
        cases.append(Case(spec["name"], spec["kind"], case_json.parent, spec))
    return cases


def load_expected(case: Case) -> Expected:
    path = case.expected_path()
    if path is not None:
        return Expected(json.loads(path.read_text(encoding="utf-8")), "file")
    code = DESCRIPTION_CODES.get(case.name) or _code_from_description(case)
    return Expected({"outcome": "error", "error": {"code": code}}, "description")


def load_script(case: Case, key: str, default: str) -> dict[str, Any] | None:
    """The script ``case.json`` names under ``key`` (``model_script``, ``sandbox_script``),
    else the conventional file ``default``; None when the case ships neither."""
    path = case.path / (case.spec.get(key) or default)
    if not path.exists():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def _code_from_description(case: Case) -> str:
    """Cases without an expected file end their description with ``: <code>``."""
    for match in _CODE_AFTER_COLON.finditer(case.spec.get("description", "")):
        if match.group(1) in WIRE_CODES:
            return match.group(1)
    raise AssertionError(f"{case.name}: no expected file and no error code in its description")


# --- kinds ---------------------------------------------------------------------------------

def run_reduce(case: Case) -> Expected:
    """Import read-only: verify the export while folding it, then compare what is pinned."""
    # Imported per case so a broken reduce fails the reduce cases, not the whole collection.
    from threads.log.fold import Fold

    expected = load_expected(case)
    fold = Fold(now_ms=case.spec.get("clock", {}).get("now"))
    data = case.log_path().read_bytes()
    try:
        result = verify_export(data, apply=fold.apply, on_header=fold.header)
    except LogError as err:
        _compare_error(expected, err)
        return expected
    assert expected.doc["outcome"] == "ok", (
        f"log was accepted, expected error {expected.doc.get('error')}"
    )
    if "state" in expected.doc:
        _compare_state(expected, fold.state())
    for key, want in expected.doc.get("projections", {}).items():
        assert fold.projections().get(key) == want, f"projection {key} differs"
    assert result.committed_bytes == expected.doc.get("committed_bytes", result.committed_bytes)
    assert result.head_verified == expected.doc.get("head_verified", True)
    return expected


def _compare_error(expected: Expected, err: LogError) -> None:
    got = {"code": err.code, "seq": err.seq}
    assert expected.doc["outcome"] == "error", f"expected ok, got {got}: {err.message}"
    want = expected.doc["error"]
    if "seq" not in want:
        got.pop("seq")
    assert got == want, f"error {got} ({err.message}), expected {want}"


def _compare_state(expected: Expected, actual: dict[str, Any]) -> None:
    want = expected.doc["state"]
    if expected.partial_state:
        actual = _restrict(actual, want)
    assert actual == want


def _restrict(actual: Any, shape: Any) -> Any:
    """``actual`` with only the object keys ``shape`` has (for expected files that predate a
    field); lists and scalars compare whole."""
    if isinstance(actual, dict) and isinstance(shape, dict):
        return {k: _restrict(actual[k], shape[k]) for k in shape if k in actual}
    return actual


KIND_RUNNERS: dict[str, Callable[[Case], Expected]] = {"reduce": run_reduce}


def run_case(case: Case) -> Expected:
    """Run one case; raises ``CaseSkipped`` when it cannot run here, AssertionError on failure."""
    if case.name in KNOWN_DATA_MISMATCHES:
        raise CaseSkipped(KNOWN_DATA_MISMATCHES[case.name])
    runner = KIND_RUNNERS.get(case.kind)
    if runner is None:
        raise CaseSkipped(f"no runner for kind {case.kind!r} yet (runners: {sorted(KIND_RUNNERS)})")
    check_fields(case.kind, {
        "case": case.spec,
        "expected": load_expected(case).doc,
        "model": load_script(case, "model_script", "model.json"),
        "sandbox": load_script(case, "sandbox_script", "sandbox.json"),
    })
    return runner(case)
