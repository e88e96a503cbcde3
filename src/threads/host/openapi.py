"""``GET /openapi.json``: every route of the host with its parameters, bodies and answers.

Schemas come from the Pydantic models the routes check (``threads.host.bodies``), so the
document describes exactly what is enforced. Every ``/v1`` route may answer 401, 400 and 413 (a
body over the limit) and its listed refusals with an ``ErrorBody``.
"""

from __future__ import annotations

from pydantic.json_schema import models_json_schema

from threads.host.bodies import ANSWERS, REQUESTS
from threads.host.routes_inbox import KINDS
from threads.host.routes_inbox import MAX_LIMIT as MAX_INBOX
from threads.host.routes_threads import MAX_LIMIT, STATUSES
from threads.log.json_types import JsonObject, JsonValue

REF = "#/components/schemas/{model}"


def _ref(name: str) -> JsonObject:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: JsonObject) -> JsonObject:
    return {"application/json": {"schema": schema}}


ERROR: JsonObject = {"content": _json(_ref("ErrorBody"))}
ID: JsonObject = {"type": "string", "minLength": 1, "maxLength": 256}


def _path_param(name: str) -> JsonObject:
    return {"name": name, "in": "path", "required": True, "schema": ID}


BRANCH: JsonObject = {"name": "branch_id", "in": "query", "required": False, "schema": ID}
THREAD = _path_param("thread_id")


def _op(
    summary: str,
    ok_status: str,
    ok: JsonObject | None,
    *,
    params: list[JsonValue],
    body: str | None = None,
    errors: tuple[str, ...] = ("400", "404", "409"),
    ok_content: JsonObject | None = None,
    ok_headers: JsonObject | None = None,
    more: JsonObject | None = None,
) -> JsonObject:
    """An operation; ``more`` adds answers after the refusals."""
    answer: JsonObject = {"description": "ok", "content": ok_content or _json(ok or {})}
    if ok_headers is not None:
        answer["headers"] = ok_headers
    responses: JsonObject = {ok_status: answer, "401": {"description": "no principal", **ERROR}}
    for status in errors:
        responses[status] = {"description": "refused", **ERROR}
    responses.update(more or {})
    op: JsonObject = {"summary": summary, "parameters": params, "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": True, "content": _json(_ref(body))}
        responses["413"] = {"description": "body too large", **ERROR}
    return op


def _query(name: str, schema: JsonObject) -> JsonObject:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _paging(most: int) -> list[JsonValue]:
    return [
        _query("limit", {"type": "string", "pattern": "^[0-9]{1,6}$",
                         "description": f"1 to {most}"}),
        _query("cursor", {"type": "string", "maxLength": 2048,
                          "description": "from the previous page's Link header"}),
    ]


def _list(name: str) -> JsonObject:
    return {"type": "array", "items": _ref(name)}


def document() -> JsonObject:
    _, defs = models_json_schema(
        [(m, "validation") for m in REQUESTS.values()]
        + [(m, "serialization") for m in ANSWERS.values()],
        ref_template=REF,
    )
    schemas = defs.get("$defs", {})
    key: JsonObject = {"name": "Idempotency-Key", "in": "header", "required": True,
           "schema": {"type": "string", "minLength": 1, "maxLength": 255}}
    sse: JsonObject = {"text/event-stream": {"schema": {"type": "string"}}}
    resume: list[JsonValue] = [
        {"name": "after_seq", "in": "query", "required": False,
         "schema": {"type": "string", "pattern": "^[0-9]{1,16}$"}},
        {"name": "Last-Event-ID", "in": "header", "required": False,
         "schema": {"type": "string", "pattern": "^[0-9]{1,16}$"}},
    ]
    t = "/v1/threads/{thread_id}"
    link: JsonObject = {"Link": {
        "description": 'the next page: <URL>; rel="next" (absent on the last page)',
        "schema": {"type": "string"}}}
    threads_list = _op("The caller's threads: parked first, then the most recently updated",
                       "200", _list("ThreadSummary"), params=[
                           _query("status", {"enum": list(STATUSES)}),
                           _query("agent", ID), _query("q", {"type": "string", "maxLength": 256}),
                           *_paging(MAX_LIMIT)],
                       errors=("400",), ok_headers=link)
    inbox = _op("Everything waiting for a person across the caller's tenant, newest first",
                "200", _list("InboxItem"), params=[
                    _query("kind", {"enum": list(KINDS)}), *_paging(MAX_INBOX)],
                errors=("400",), ok_headers=link)
    paths: JsonObject = {
        "/v1/runs": {"post": _op("Start a run (once per Idempotency-Key)", "202",
                                 _ref("RunAccepted"), params=[key], body="StartRunRequest")},
        "/v1/threads": {"get": threads_list},
        "/v1/inbox": {"get": inbox},
        t: {"get": _op(
            "The thread, the thread it was started from and the threads it started", "200",
            _ref("ThreadDetail"), params=[THREAD], errors=("404",))},
        f"{t}/events": {"get": _op(
            "The branch's committed events (SSE) from the resume point on, followed live",
            "200", None, params=[THREAD, BRANCH, *resume], ok_content=sse,
            errors=("400", "404"))},
        f"{t}/overview": {"get": _op(
            "Status, spend, model calls, effects and what waits for a decision", "200",
            _ref("ThreadOverview"), params=[THREAD, BRANCH], errors=("400", "404", "409"))},
        f"{t}/runs/{{run_id}}/events": {"get": _op(
            "A run's committed events (SSE), then its result", "200", None,
            params=[THREAD, _path_param("run_id"), *resume], ok_content=sse,
            errors=("400", "404"))},
        f"{t}/timeline": {"get": _op("The branch's resolved chain, oldest first", "200",
                                     _ref("Timeline"), params=[THREAD, BRANCH],
                                     errors=("400", "404", "409"))},
        f"{t}/branches": {"get": _op("The thread's branches", "200", _list("BranchEntry"),
                                     params=[THREAD], errors=("404",))},
        f"{t}/fork-points": {"get": _op("Snapshots a fork may start at", "200",
                                        _list("ForkPoint"), params=[THREAD, BRANCH])},
        f"{t}/forks": {"post": _op("Fork at a snapshot", "201", _ref("BranchRef"),
                                   params=[THREAD, BRANCH], body="ForkRequest")},
        f"{t}/approvals": {"get": _op("Open approval challenges", "200",
                                      _list("PendingApproval"), params=[THREAD, BRANCH])},
        f"{t}/approvals/{{challenge_id}}": {"post": _op(
            "Grant or deny a challenge", "200", _ref("Appended"),
            params=[THREAD, _path_param("challenge_id")], body="ApprovalDecision",
            errors=("400", "403", "404", "409"))},
        f"{t}/questions/{{call_id}}/answer": {"post": _op(
            "Answer a question the run asked", "200", _ref("Appended"),
            params=[THREAD, _path_param("call_id"), BRANCH], body="Answer",
            errors=("400", "403", "404", "409"))},
        f"{t}/parked/{{effect_key}}/resolve": {"post": _op(
            "Resolve a parked effect", "200", _ref("Appended"),
            params=[THREAD, _path_param("effect_key"), BRANCH], body="ParkedResolution",
            errors=("400", "403", "404", "409"))},
        f"{t}/cancel": {"post": _op(
            "Cancel the open turn", "200", _ref("Appended"), params=[THREAD, BRANCH],
            errors=("400", "403", "404", "409"), more={"202": {
                "description": "the cancel is recorded by the run at its next step",
                "content": _json(_ref("CancelAccepted")),
            }})},
        f"{t}/settings": {"post": _op("Change the model settings of the next steps", "200",
                                      _ref("Appended"), params=[THREAD, BRANCH],
                                      body="SettingsChange",
                                      errors=("400", "403", "404", "409"))},
        f"{t}/mode": {"post": _op("Change the permission mode of the next steps", "200",
                                  _ref("Appended"), params=[THREAD, BRANCH], body="ModeChange",
                                  errors=("400", "403", "404", "409"))},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "threads host",
            "version": "1",
            "description": "Runs, approvals and parked effects over HTTP. Another tenant's"
            " thread is 404; the local operator principal is never used.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
