"""The conformance runner acts on every field of the case format it accepts, and refuses the rest.

Synthetic cases, built in a temporary directory from vendored ones (never written to the shared
data): a fork whose restore crashes the host, loses its answer, or restores another tree; a
pinned ``child_state`` or ``parent_unchanged: false``; fields and values no runner acts on
(refused ``unsupported field`` / ``unsupported value``). Then, for every honoured field a
vendored case uses, one changed value changes the case's result (the runner read it), except
the fields listed in ``NOT_OBSERVABLE`` with why. Last, every honoured field is exercised by one
of the two.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import kinds  # noqa: F401 (registers the runners)
import pytest
from fields import (
    _DOCUMENTS,
    HONOURED,
    UnsupportedFieldError,
    _branch,
    _covers,
    _leaves,
    _resolve,
    _schema_defs,
)
from runner import Case, CaseSkipped, discover, load_expected, load_script, run_case

from shared_data import CASES, skip_module_unless

skip_module_unless(CASES, "the conformance cases")

Edit = Callable[[dict[str, Any]], None]
PLAIN = "fork-knowledge-pinned"  # forks through a restore function, outcome ok
LEDGERED = "fork-restore-lost-found"  # forks through the resource ledger, outcome ok


def synthetic(tmp: Path, source: str, **edits: Edit) -> Case:
    """A copy of vendored case ``source`` with each named file (``case``, ``expected``,
    ``sandbox``, ``model``) edited in place."""
    folder = tmp / source
    shutil.copytree(CASES / source, folder)
    case = discover(tmp)[0]
    for name, edit in edits.items():
        path = _file_of(case, name)
        doc = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        edit(doc)
        path.write_text(json.dumps(doc), encoding="utf-8")
    return discover(tmp)[0]


def _file_of(case: Case, name: str) -> Path:
    if name == "expected":
        return case.expected_path() or case.path / "expected.json"
    if name == "case":
        return case.path / "case.json"
    return case.path / (case.spec.get(f"{name}_script") or f"{name}.json")


def result(case: Case) -> str:
    """``pass``, ``skip``, or ``fail: <why>``."""
    try:
        run_case(case)
    except CaseSkipped:
        return "skip"
    except Exception as exc:  # an assertion, or a changed script the fakes can't play
        return f"fail: {exc}"
    return "pass"


def snapshot(**fields: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        doc["snapshots"]["snap_01"].update(fields)
    return edit


def expect(**fields: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                doc.pop(key, None)
            elif isinstance(value, dict) and isinstance(doc.get(key), dict):
                doc[key].update(value)
            else:
                doc[key] = value
    return edit


# ---- fork: the fake sandbox's snapshot script ------------------------------------------------

CRASHED = {"outcome": "ok", "appended": [],
           "fork": {"child_created": False, "parent_unchanged": True}}


def test_restore_response_crash_kills_the_host_then_recovery_releases_the_sandbox(
    tmp_path: Path,
) -> None:
    released = {"creates": 1, "rows": [{"kind": "sandbox", "state": "released"}]}
    crashed = {**CRASHED, "resources": released}
    case = synthetic(tmp_path, LEDGERED, sandbox=snapshot(restore_response="crash"),
                     expected=lambda doc: (doc.clear(), doc.update(crashed)))
    assert result(case) == "pass"
    # the vendored expectation (a child, its sandbox live) no longer holds once the host died
    again = synthetic(tmp_path / "again", LEDGERED, sandbox=snapshot(restore_response="crash"))
    assert result(again).startswith("fail: child creation differs")


def test_restore_response_crash_on_the_plain_path_leaves_no_runnable_child(
    tmp_path: Path,
) -> None:
    case = synthetic(tmp_path, PLAIN, sandbox=snapshot(restore_response="crash"),
                     expected=lambda doc: (doc.clear(), doc.update(CRASHED)))
    assert result(case) == "pass"


def test_restore_response_lost(tmp_path: Path) -> None:
    lost = {"outcome": "error", "error": {"code": "unavailable"}}
    plain = synthetic(tmp_path / "plain", PLAIN, sandbox=snapshot(restore_response="lost"),
                      expected=lambda doc: (doc.clear(), doc.update(lost)))
    assert result(plain) == "pass"  # no ledger to find the lost create in: the fork fails
    ledgered = synthetic(tmp_path / "ledgered", LEDGERED,
                         sandbox=snapshot(create_lookup="unsupported"))
    assert result(ledgered).startswith("fail:")  # lost and not found again: no child


def test_a_restored_tree_that_is_not_the_snapshot_s_is_refused(tmp_path: Path) -> None:
    tree = [{"mode": 420, "path": "README.md", "sha256": "0" * 64, "size": 1}]
    mismatch = {"outcome": "error", "error": {"code": "snapshot_manifest_mismatch"}}
    case = synthetic(tmp_path, PLAIN, sandbox=snapshot(manifest=tree),
                     expected=lambda doc: (doc.clear(), doc.update(mismatch)))
    assert result(case) == "pass"
    vendored = synthetic(tmp_path / "vendored", PLAIN, sandbox=snapshot(manifest=tree))
    assert result(vendored).startswith("fail:")


def test_child_state_and_parent_unchanged_are_compared(tmp_path: Path) -> None:
    wrong = {"fork": {"child_state": {"status": "idle"}}}
    case = synthetic(tmp_path / "state", PLAIN, expected=expect(**wrong))
    assert result(case) == "fail: child state differs"
    changed = synthetic(tmp_path / "parent", PLAIN,
                        expected=expect(fork={"parent_unchanged": False}))
    assert result(changed) == "fail: parent unchanged: True"


# ---- fields and values no runner acts on are refused ----------------------------------------

def _set(path: list[str], value: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        for key in path[:-1]:
            doc = doc.setdefault(key, {})
        doc[path[-1]] = value
    return edit


@pytest.mark.parametrize(("source", "file", "path", "value", "refused"), [
    (PLAIN, "case", ["stub_script"], "stubs.json", "case.stub_script"),
    (PLAIN, "case", ["expect"], {"must": [{"type": "fork"}]}, "case.expect.must[].type"),
    (PLAIN, "case", ["input", "text"], "hi", "case.input.text"),
    (PLAIN, "case", ["model_script"], "model.json", "case.model_script"),
    (PLAIN, "case", ["surprise"], 1, "case.surprise"),
    (PLAIN, "expected", ["inbox"], [{"channel": "c", "item_key": "k"}], "expected.inbox[]"),
    (PLAIN, "expected", ["fork", "extra"], 1, "expected.fork.extra"),
    (PLAIN, "sandbox", ["tools"], {"read": {"output": "x"}}, "sandbox.tools.*.output"),
    ("agent-finished-twice-rejected", "expected", ["appended"], [{"type": "x"}],
     "expected.appended[].type"),
    ("agent-finished-twice-rejected", "case", ["input", "calls"], [], "case.input.calls"),
    ("calls-mixed-decisions-recorded-in-part-order", "sandbox", ["snapshots"],
     {"s": {"restore_sandbox_id": "x", "manifest": []}},
     "sandbox.snapshots.*.restore_sandbox_id"),
    ("calls-mixed-decisions-recorded-in-part-order", "expected", ["api"], [{"status": 200}],
     "expected.api[].status"),
    ("prefix-stable-across-turns", "expected", ["render", "more"], 1, "expected.render.more"),
])
def test_a_field_the_kind_does_not_act_on_fails_the_case(
    tmp_path: Path, source: str, file: str, path: list[str], value: Any, refused: str
) -> None:
    case = synthetic(tmp_path, source, **{file: _set(path, value)})
    with pytest.raises(UnsupportedFieldError) as caught:
        run_case(case)
    assert str(caught.value).startswith(f"unsupported field {refused}")


def test_a_value_the_runner_does_not_play_fails_the_case(tmp_path: Path) -> None:
    case = synthetic(tmp_path, LEDGERED, sandbox=snapshot(restore_response="slow"))
    with pytest.raises(UnsupportedFieldError) as caught:
        run_case(case)
    assert str(caught.value).startswith(
        "unsupported value sandbox.snapshots.*.restore_response = 'slow'")


# ---- every honoured field a vendored case uses: changing it changes the result ---------------

# (kind, honoured field) -> why no one-value change of it can show in any vendored case's result
NOT_OBSERVABLE: dict[tuple[str, str], str] = {
    **{(kind, f"case.{name}"): "case metadata: names the case, not what it runs"
       for kind in HONOURED for name in ("name", "family", "description")},
    **{(kind, "case.kind"): "picks the runner: another kind's runner fails or skips it"
       for kind in HONOURED},
    ("reduce", "case.clock.now"): "the reducer's now only matters for an expiry the case pins",
    ("render", "case.clock.now"): "rendering does not read the clock",
    ("fork", "case.clock.now"): "the cases' snapshots never expire within a changed millisecond",
    ("fork", "sandbox.snapshots.*.restore_response"): "lost then found again ends like ok; crash"
    " and lost without a lookup are the synthetic tests above",
    ("fork", "sandbox.snapshots.*.manifest.**"): "only the error case ships a manifest, and it"
    " fails before restoring; the synthetic test above restores another tree",
    ("fork", "case.sandbox_script"): "naming another file makes the case skip as data missing",
    ("recover", "case.sandbox_script"): "naming another file makes the case skip as data missing",
    ("recover", "case.model_script"): "the one case naming a shipped model.json makes no call",
    ("recover", "model.responses[].usage.**"): "no recover case pins usage after recovery",
    ("recover", "sandbox.tools.*.lookup.*.final"): "a vendored tool's answers all share one"
    " finality, and one changed answer makes the fake's lookup unknown, which parks as before",
}


def _first_matcher(**fields: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        doc["appended"][0].update(fields)
    return edit


def _tool(**fields: Any) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        next(iter(doc["tools"].values())).update(fields)
    return edit


MIXED = "calls-mixed-decisions-recorded-in-part-order"  # recover, appends, a sandbox script
REDUCED = "budget-exceeded-terminal"  # reduce, outcome ok
# honoured fields no vendored case uses: (source case, file, edit) that must change its result
SYNTHETIC: dict[tuple[str, str], tuple[str, str, Edit]] = {
    ("fork", "case.input.knowledge_policy"): (PLAIN, "case", _set(
        ["input", "knowledge_policy"], "current")),
    ("fork", "expected.appended[].actor_kind"): (PLAIN, "expected", _first_matcher(
        actor_kind="user")),
    ("fork", "expected.appended[].critical"): (PLAIN, "expected", _first_matcher(
        critical=False)),
    ("fork", "expected.appended[].epoch"): (PLAIN, "expected", _first_matcher(epoch=7)),
    ("fork", "expected.appended[].seq"): (PLAIN, "expected", _first_matcher(seq=11)),
    ("fork", "expected.fork.child_state.**"): (PLAIN, "expected", expect(
        fork={"child_state": {"status": "idle"}})),
    ("recover", "expected.appended[].branch_id"): (MIXED, "expected", _first_matcher(
        branch_id="0192b000-0000-7000-8000-0000000000ff")),
    ("recover", "expected.appended[].seq"): (MIXED, "expected", _first_matcher(seq=1)),
    ("recover", "sandbox.tools.*.is_error"): (MIXED, "sandbox", _tool(is_error=True)),
    ("reduce", "expected.committed_bytes"): (REDUCED, "expected", expect(committed_bytes=1)),
    ("reduce", "expected.head_verified"): (REDUCED, "expected", expect(head_verified=False)),
    ("render", "expected.appended"): ("prefix-stable-across-turns", "expected", expect(
        appended=[{"type": "model_request"}])),
}


@pytest.mark.parametrize("field", sorted(SYNTHETIC), ids=lambda f: f"{f[0]}:{f[1]}")
def test_a_field_no_vendored_case_uses_is_acted_on(
    tmp_path: Path, field: tuple[str, str]
) -> None:
    source, file, edit = SYNTHETIC[field]
    assert result(synthetic(tmp_path, source, **{file: edit})).startswith("fail:")


ALTERNATIVES = {
    "restore_response": {"lost": "ok", "ok": "lost", "crash": "ok"},
    "create_lookup": {"found": "unsupported", "unsupported": "found"},
    "decision": {"allow": "deny", "deny": "allow", "ask": "allow"},
    "process": {"running": "terminated", "terminated": "running", "unknown": "terminated"},
    "result": {"found": "not_found", "not_found": "found"},
    "outcome": {"ok": "error", "error": "ok"},
    "stop_reason": {"tool_use": "end_turn", "end_turn": "tool_use", "max_tokens": "end_turn"},
    "reason": {"rate_limited": "overloaded", "overloaded": "rate_limited",
               "server_error": "rate_limited"},
}
A_RESPONSE = {"content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn",
              "usage": {"input_tokens": 1, "output_tokens": 1}}


def _documents(case: Case) -> dict[str, Any]:
    return {"case": case.spec, "expected": load_expected(case).doc,
            "model": load_script(case, "model_script", "model.json"),
            "sandbox": load_script(case, "sandbox_script", "sandbox.json")}


def _uses() -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(kind, honoured field) -> [(case name, leaf path)] over the vendored cases that pass."""
    defs = _schema_defs(str(CASES.parent / "case.schema.json"))
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for case in discover(CASES):
        for name, doc in _documents(case).items():
            if doc is None or case.kind not in HONOURED:
                continue
            for path, _ in _leaves(doc, {"$ref": f"#/$defs/{_DOCUMENTS[name]}"}, defs, name):
                for field in (h for h in HONOURED[case.kind] if _covers(h, path)):
                    found.setdefault((case.kind, field), []).append((case.name, path))
    return found


USES = _uses() if CASES.is_dir() else {}


def _changed(value: Any, path: str) -> Any:
    last = path.rsplit(".", 1)[-1].removesuffix("[]")
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return ALTERNATIVES.get(last, {}).get(value, value + "x")
    if value == [] and path == "model.responses":
        return [A_RESPONSE]
    return [{"type": "x"}] if value == [] else 1


def _change_first(doc: Any, document: str, leaf: str) -> None:
    """Change the first leaf at ``leaf`` (a path as ``fields`` names it) in place."""
    defs = _schema_defs(str(CASES.parent / "case.schema.json"))

    def walk(value: Any, schema: Any, path: str) -> Any:
        schema = _branch(value, _resolve(schema, defs), defs)
        described = schema if isinstance(schema, dict) else {}
        children: list[tuple[Any, Any, str]] = []
        if isinstance(value, dict) and value:
            properties, extra = described.get("properties"), described.get("additionalProperties")
            for key in value:
                sub, segment = (properties.get(key), key) if properties is not None else (
                    (extra, "*") if isinstance(extra, dict) else (None, key))
                children.append((key, sub, f"{path}.{segment}"))
        elif isinstance(value, list) and value:
            children = [(i, described.get("items"), f"{path}[]") for i in range(len(value))]
        elif path == leaf:
            return _changed(value, leaf)
        for key, sub, child in children:
            if leaf == child or leaf.startswith((child + ".", child + "[")):
                new = walk(value[key], sub, child)
                if new is not None:
                    value[key] = new
                    return value
        return None

    assert walk(doc, {"$ref": f"#/$defs/{_DOCUMENTS[document]}"}, document) is not None


@cache
def _passing() -> frozenset[str]:
    """The vendored cases that pass as they are (the baseline a changed copy is judged by)."""
    return frozenset(case.name for case in discover(CASES) if result(case) == "pass")


@pytest.mark.parametrize("use", sorted(set(USES) - set(NOT_OBSERVABLE) - set(SYNTHETIC)),
                         ids=lambda use: f"{use[0]}:{use[1]}")
def test_changing_an_honoured_field_changes_the_result(
    tmp_path: Path, use: tuple[str, str]
) -> None:
    first_leaf = {}  # one leaf per distinct passing case, in discovery order
    for name, leaf in USES[use]:
        if name in _passing():
            first_leaf.setdefault(name, leaf)
    assert first_leaf, f"{use}: no passing vendored case uses it; add it to SYNTHETIC"
    for name, leaf in list(first_leaf.items())[:4]:
        document = leaf.split(".", 1)[0].split("[", 1)[0]
        case = synthetic(tmp_path / name, name,
                         **{document: lambda doc, d=document, p=leaf: _change_first(doc, d, p)})
        if result(case) != "pass":
            return
    pytest.fail(f"{use}: changing it left the result of {list(first_leaf)[:4]} unchanged")


def test_every_honoured_field_is_exercised() -> None:
    honoured = {(kind, field) for kind, fields in HONOURED.items() for field in fields}
    assert honoured - set(USES) - set(NOT_OBSERVABLE) - set(SYNTHETIC) == set()
    assert set(NOT_OBSERVABLE) | set(SYNTHETIC) <= honoured
