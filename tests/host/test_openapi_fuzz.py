"""A property-based run against ``/openapi.json`` (schemathesis) on a real ``threads serve``:
every route, generated requests, with and without a principal. No answer may be a 5xx, and
every answer must match what the document says of that route (status code, content type, body
schema). Bounded: ``MAX_EXAMPLES`` per route and principal, so it stays quick in the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hypothesis
import pytest
import schemathesis
from host_support import HostServer
from hypothesis import HealthCheck, given, settings

pytestmark = pytest.mark.timeout(300)
MAX_EXAMPLES = 15
SUMMARY: list[str] = []


def test_no_5xx_and_every_answer_matches_the_document(server: HostServer) -> None:
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    failures: list[str] = []
    made = [0]
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for token in ("alice-token", None):
            _checker(server, operation, token, failures, made)()
    SUMMARY.append(
        f"schemathesis: {operations} operations, {made[0]} requests, {len(failures)} failures"
    )
    assert failures == []


def _checker(
    server: HostServer, operation: Any, token: str | None, failures: list[str], made: list[int]
) -> Callable[[], None]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    checks = [
        schemathesis.checks.not_a_server_error,
        schemathesis.checks.status_code_conformance,
        schemathesis.checks.content_type_conformance,
        schemathesis.checks.response_schema_conformance,
    ]

    @given(case=operation.as_strategy())
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[hypothesis.Phase.generate])
    def check(case: Any) -> None:
        made[0] += 1
        response = case.call(base_url=server.url, headers=headers, timeout=10)
        try:
            case.validate_response(response, checks=checks)
        except Exception as error:  # schemathesis raises a FailureGroup of what broke
            failures.append(f"{case.method} {case.formatted_path}: {error}"[:600])

    return check
