"""The drills' own checks can fail: ``tool_message_problems`` and ``duplicate_counts`` on small
hand-made logs (no processes) flag each way a tool message can disagree with the service; the
fake service's HTTP face refuses a send with an older fencing token."""

from __future__ import annotations

from typing import Any

import httpx
from drill_harness import ASSUMED_DONE, duplicate_counts, tool_message_problems

from threads.testing.fake_service import FakeService

BRANCH = "b1"


def log(*results: tuple[str, str, str, str], resolutions: tuple[tuple[str, str], ...] = ()
        ) -> list[dict[str, Any]]:
    """Events for ``(call_id, tool, origin, text)`` calls and their results."""
    events: list[dict[str, Any]] = []
    for call_id, name, _, _ in results:
        args = {"account": "a1"} if name == "look_up" else {"amount": 5}
        events.append({"type": "tool_call", "branch_id": BRANCH,
                       "data": {"call_id": call_id, "name": name, "input": args}})
    for call_id, outcome in resolutions:
        events.append({"type": "effect_resolved", "branch_id": BRANCH,
                       "data": {"call_id": call_id, "outcome": outcome, "by": "human"}})
    for call_id, _, origin, text in results:
        events.append({"type": "tool_result", "branch_id": BRANCH,
                       "data": {"call_id": call_id, "origin": origin, "preview": text}})
    return events


def service(counts: dict[str, int], values: dict[str, str]) -> dict[str, Any]:
    return {"counts": {f"{BRANCH}:{k}": n for k, n in counts.items()},
            "values": {f"{BRANCH}:{k}": v for k, v in values.items()}}


def test_agreeing_log_has_no_problem() -> None:
    events = log(("c1", "look_up", "executed", "account a1 is open"),
                 ("c2", "charge_card", "executed", "charged 5"),
                 ("c3", "send_email", "executed", ASSUMED_DONE))
    assert tool_message_problems(events, service({"c2": 1, "c3": 1},
                                                 {"c2": "charged 5", "c3": "x"})) == []


def test_assume_done_without_an_application_is_flagged() -> None:
    events = log(("c1", "send_email", "executed", ASSUMED_DONE))
    [problem] = tool_message_problems(events, service({}, {}))
    assert "never applied" in problem


def test_a_result_that_is_not_the_receipt_is_flagged() -> None:
    events = log(("c1", "charge_card", "executed", "charged 6"))
    [problem] = tool_message_problems(events, service({"c1": 1}, {"c1": "charged 5"}))
    assert "receipt" in problem


def test_a_result_with_no_application_is_flagged() -> None:
    events = log(("c1", "refund", "materialized_from_commit", "refunded 2"))
    [problem] = tool_message_problems(events, service({}, {}))
    assert "receipt" in problem


def test_a_second_application_needs_an_operators_assume_not_done() -> None:
    events = log(("c1", "send_email", "executed", "emailed"))
    twice = service({"c1": 2}, {"c1": "emailed"})
    [problem] = tool_message_problems(events, twice)
    assert "applied 2 times" in problem
    assert duplicate_counts(events, twice) == {f"{BRANCH}:c1": 2}
    accepted = log(("c1", "send_email", "executed", "emailed"),
                   resolutions=(("c1", "assume_not_done"),))
    assert tool_message_problems(accepted, twice) == []
    assert duplicate_counts(accepted, twice) == {}


def test_a_call_that_never_ran_must_not_be_applied_and_needs_one_result() -> None:
    events = log(("c1", "refund", "denied", "denied: policy"))
    [problem] = tool_message_problems(events, service({"c1": 1}, {"c1": "refunded 2"}))
    assert "never ran" in problem
    missing = log(("c1", "look_up", "executed", "account a1 is open"))[:1]
    assert tool_message_problems(missing, service({}, {})) == ["c1: 0 tool results"]


def test_a_wrong_look_up_answer_is_flagged() -> None:
    events = log(("c1", "look_up", "executed", "account a2 is open"))
    [problem] = tool_message_problems(events, service({}, {}))
    assert "look-up" in problem


def test_the_service_refuses_an_older_fencing_token(service: FakeService) -> None:
    """The HTTP face counts what arrives and refuses a send from an earlier epoch."""
    url = f"http://127.0.0.1:{service.http_port}"
    body = {"kind": "email", "value": "emailed", "dedup": False, "who": "t"}
    with httpx.Client(base_url=url) as http:
        newer = http.post("/apply", json={**body, "key": "b9:c1",
                                          "fence": {"scope": "b9", "epoch": 3}})
        older = http.post("/apply", json={**body, "key": "b9:c2",
                                          "fence": {"scope": "b9", "epoch": 2}})
        found = http.get("/lookup", params={"key": "b9:c1"})
    assert newer.status_code == 200
    assert older.status_code == 409
    assert found.json() == {"found": True, "value": "emailed"}
    snapshot = service.client().snapshot()
    assert snapshot["counts"].get("b9:c1") == 1
    assert "b9:c2" not in snapshot["counts"]
    assert [h["key"] for h in snapshot["http"]] == ["b9:c1", "b9:c2", "b9:c1"]
