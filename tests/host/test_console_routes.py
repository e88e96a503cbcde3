"""The routes the operator console reads: ``GET /v1/inbox`` (what waits for a person across the
tenant, with the words to decide by, paged), ``GET /v1/threads`` (filtered, parked first,
paged) and ``GET /v1/threads/{id}/overview`` (model calls, effects, decisions of one branch).

The app runs in process (httpx's ASGI transport) over a real SQLite store on a fake clock; the
threads are made by library runs of ``console_agents`` as alice, so the host only reads them.
A stranger of another tenant sees none of it; bob, of alice's tenant, sees it but may decide
nothing, and the host refuses him exactly where the inbox says so.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from console_agents import agents
from host_support import TOKENS

from threads import Principal
from threads.clock import FakeClock
from threads.host.app import host
from threads.host.auth import BearerTokens
from threads.host.ui import FILES
from threads.store.protocol import Store

pytestmark = pytest.mark.timeout(60)

ALICE = Principal(issuer="test", tenant="acme", subject="alice")
BY_NAME = {a.name: a for a in agents()}


def clock(store: Store) -> FakeClock:
    assert isinstance(store.clock, FakeClock)
    return store.clock


async def started(store: Store, name: str, text: str) -> str:
    """A library run of ``name`` as alice; the id of the thread it made."""
    result = await BY_NAME[name].run(text, store=store, principal=ALICE)
    clock(store).advance(1000)
    return result.thread.id


def app(store: Store) -> Any:
    table = {token: Principal(**who) for token, who in TOKENS.items()}
    return host(store, agents(), authenticate=BearerTokens(table))


def client(application: Any, token: str = "alice-token") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                             base_url="http://host", headers={"authorization": f"Bearer {token}"})


async def get(http: httpx.AsyncClient, path: str) -> Any:
    response = await http.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def refused(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def three_waiting(store: Store) -> dict[str, str]:
    return {
        "clerk": await started(store, "clerk", "Pay invoice INV-7"),
        "mailer": await started(store, "mailer", "Mail the receipt"),
        "asker": await started(store, "asker", "Pick a colour"),
        "greeter": await started(store, "greeter", "Hello"),
    }


async def test_the_inbox_lists_what_waits_for_a_person_with_the_words_to_decide_by(
    store: Store,
) -> None:
    threads = await three_waiting(store)
    application = app(store)
    async with client(application) as alice:
        items = await get(alice, "/v1/inbox")
    assert [i["kind"] for i in items] == ["question", "effect", "approval"]  # newest first
    question, effect, approval = items
    assert approval["thread_id"] == threads["clerk"]
    assert approval["agent"] == "clerk"
    assert approval["may_decide"] is True
    a = approval["approval"]
    assert (a["tool"], a["input"], a["effect_class"]) == (
        "wire_money", {"amount": 120, "to": "ACME GmbH"}, "unguarded")
    assert a["requested_by"] == {"issuer": "test", "tenant": "acme", "subject": "alice"}
    assert a["expires_at"] > a["requested_at"] == approval["since"]
    assert a["expired"] is False

    e = effect["effect"]
    assert (e["tool"], e["effect_class"], e["attempts"], e["reason"]) == (
        "send_email", "unguarded", 1, "timeout")
    assert e["input"] == {"subject": "Your receipt", "to": "c@example.com"}
    assert "timed out before the provider answered" in e["proved"]
    assert "no lookup and no deduplication" in e["unproved"]
    assert "without sending it again" in e["if_done"]
    assert "happens twice" in e["if_not_done"]
    assert e["effect_key"] in e["if_not_done"]
    assert e["not_done_refused_until"] is None

    q = question["question"]
    assert (q["question"], q["options"], q["multi_select"]) == ("Which colour?", ["red", "blue"],
                                                               False)
    assert q["asked_by"]["subject"] == "alice"

    async with client(application) as alice:
        only = await get(alice, "/v1/inbox?kind=effect")
        assert [i["kind"] for i in only] == ["effect"]
        assert refused(await alice.get("/v1/inbox?kind=everything")) == (400, "invalid_request")


async def test_a_stranger_sees_nothing_and_a_colleague_may_decide_nothing(
    store: Store,
) -> None:
    threads = await three_waiting(store)
    application = app(store)
    async with client(application, "eve-token") as eve:
        assert await get(eve, "/v1/inbox") == []  # another tenant of the same host
        assert await get(eve, "/v1/threads") == []
        assert refused(await eve.get(f"/v1/threads/{threads['clerk']}/overview")) == (
            404, "not_found")
    async with client(application, "bob-token") as bob:
        items = await get(bob, "/v1/inbox")
        assert len(items) == 3
        assert [i["may_decide"] for i in items] == [False, False, False]
        approval = next(i for i in items if i["kind"] == "approval")
        tid, challenge = approval["thread_id"], approval["approval"]["challenge_id"]
        response = await bob.post(f"/v1/threads/{tid}/approvals/{challenge}",
                                  json={"decision": "grant"})
        assert refused(response) == (403, "forbidden")  # as the inbox said
        question = next(i for i in items if i["kind"] == "question")
        response = await bob.post(
            f"/v1/threads/{question['thread_id']}/questions/"
            f"{question['question']['call_id']}/answer", json={"answer": "red"})
        assert refused(response) == (403, "forbidden")
    async with client(application) as alice:
        assert [i["may_decide"] for i in await get(alice, "/v1/inbox")] == [True, True, True]


async def test_the_inbox_pages_with_a_cursor_and_refuses_one_it_did_not_make(
    store: Store,
) -> None:
    await three_waiting(store)
    async with client(app(store)) as alice:
        whole = await get(alice, "/v1/inbox")
        seen: list[dict[str, Any]] = []
        path: str | None = "/v1/inbox?limit=1"
        while path is not None:
            response = await alice.get(path)
            assert response.status_code == 200
            assert len(response.json()) == 1
            seen += response.json()
            link = response.headers.get("link")
            path = link[1:link.index(">")] if link else None
        assert seen == whole
        for bad in ("nope", "W10", "WyJhIiwxLDJd", "x" * 3000):
            assert refused(await alice.get(f"/v1/inbox?cursor={bad}")) == (400, "invalid_cursor")
        for limit in ("0", "501", "-1", "1.5", "9" * 400):
            assert refused(await alice.get(f"/v1/inbox?limit={limit}")) == (
                400, "invalid_request")


async def test_the_inbox_folds_only_the_threads_whose_head_moved(
    store: Store, chain_reads: list[str]
) -> None:
    threads = await three_waiting(store)
    async with client(app(store)) as alice:
        chain_reads.clear()
        first = await get(alice, "/v1/inbox")
        # each thread waiting on alice once; the idle greeter is read from its listing row
        assert len(chain_reads) == 3
        chain_reads.clear()
        assert await get(alice, "/v1/inbox") == first
        assert await get(alice, "/v1/threads") != []
        assert chain_reads == []  # the old code would fold every thread on every call
        item = next(i for i in first if i["kind"] == "question")
        answered = await alice.post(
            f"/v1/threads/{threads['asker']}/questions/{item['question']['call_id']}/answer",
            json={"answer": "blue"})
        assert answered.status_code == 200, answered.text
        await application_idle(alice, threads["asker"])
        chain_reads.clear()
        after = await get(alice, "/v1/inbox")
        assert [i["kind"] for i in after] == ["effect", "approval"]
        root = (await store.root_branch(threads["asker"])).branch_id
        # only the thread that moved may be read again (now at rest, its listing row answers)
        assert set(chain_reads) <= {root}


async def application_idle(http: httpx.AsyncClient, thread_id: str) -> None:
    """Wait, on what the host says, for the run the decision started to end its turn."""
    response = await http.get(f"/v1/threads/{thread_id}/timeline")
    run_id = next(e["event"]["event_id"] for e in reversed(response.json()["entries"])
                  if e["event"]["type"] == "user_input")
    stream = await http.get(f"/v1/threads/{thread_id}/runs/{run_id}/events")
    assert '"kind":"result"' in stream.text


async def test_an_expired_approval_is_marked_expired_without_a_new_fold(
    store: Store, chain_reads: list[str]
) -> None:
    await started(store, "clerk", "Pay invoice INV-7")
    async with client(app(store)) as alice:
        (item,) = await get(alice, "/v1/inbox")
        assert item["approval"]["expired"] is False
        clock(store).set(item["approval"]["expires_at"])
        chain_reads.clear()
        (item,) = await get(alice, "/v1/inbox")
        assert item["approval"]["expired"] is True
        assert chain_reads == []


async def test_the_thread_list_filters_orders_parked_first_and_pages(store: Store) -> None:
    threads = await three_waiting(store)
    another = await started(store, "greeter", "Hello again")
    async with client(app(store)) as alice:
        rows = await get(alice, "/v1/threads")
        statuses = [r["status"] for r in rows]
        assert statuses == ["parked", "parked", "parked", "idle", "idle"]
        assert [r["thread_id"] for r in rows[3:]] == [another, threads["greeter"]]  # newest first
        assert [r["thread_id"] for r in rows[:3]] == [
            threads["asker"], threads["mailer"], threads["clerk"]]
        greeter = rows[4]
        assert greeter["first_input"] == "Hello"
        assert greeter["agent"] == "greeter"
        assert greeter["updated_at"] >= greeter["created_at"]
        assert greeter["cost"] is None  # no price pinned: no cost, rather than a made-up 0
        clerk = rows[2]
        assert clerk["cost"]["bounded"] is True
        assert clerk["cost"]["known_nanos"] > 0
        assert clerk["waiting"] == 1

        parked = await get(alice, "/v1/threads?status=parked")
        assert {r["thread_id"] for r in parked} == {
            threads[n] for n in ("asker", "mailer", "clerk")}
        assert [r["thread_id"] for r in await get(alice, "/v1/threads?agent=greeter")] == [
            another, threads["greeter"]]
        part = threads["mailer"][-10:].upper()
        assert [r["thread_id"] for r in await get(alice, f"/v1/threads?q={part}")] == [
            threads["mailer"]]
        assert await get(alice, "/v1/threads?agent=nobody") == []

        seen: list[str] = []
        path: str | None = "/v1/threads?limit=2"
        while path is not None:
            response = await alice.get(path)
            seen += [r["thread_id"] for r in response.json()]
            link = response.headers.get("link")
            path = link[1:link.index(">")] if link else None
        assert seen == [r["thread_id"] for r in rows]
        assert refused(await alice.get("/v1/threads?status=busy")) == (400, "invalid_request")
        assert refused(await alice.get("/v1/threads?q=" + "x" * 300)) == (400, "invalid_request")


async def test_the_overview_has_each_model_call_effect_and_decision(store: Store) -> None:
    mailer = await started(store, "mailer", "Mail the receipt")
    clerk = await started(store, "clerk", "Pay invoice INV-7")
    async with client(app(store)) as alice:
        body = await get(alice, f"/v1/threads/{clerk}/overview")
        assert (body["agent"], body["served"], body["status"]) == ("clerk", True, "parked")
        assert body["first_input"] == "Pay invoice INV-7"
        first, second = body["model_calls"]
        assert first["outcome"] == "response"
        assert first["duration_ms"] == first["ended_at"] - first["started_at"] >= 0
        assert (first["input_tokens"], first["output_tokens"]) == (812, 41)
        assert first["cost_nanos"] == 812 * 3000 + 41 * 15000
        assert body["cost"]["known_nanos"] == first["cost_nanos"] + second["cost_nanos"]
        assert body["usage"]["model_requests"] == 2
        assert [w["kind"] for w in body["waiting"]] == ["approval"]
        assert body["fork_points"] == []

        parked = await get(alice, f"/v1/threads/{mailer}/overview")
        (effect,) = parked["effects"]
        assert (effect["tool"], effect["effect_class"], effect["state"]) == (
            "send_email", "unguarded", "unknown")
        assert parked["cost"] is None  # no price pinned: no currency, no cost projection
        assert parked["model_calls"][0]["cost_nanos"] is None  # no price: unknown, not zero
        assert refused(await alice.get(f"/v1/threads/{mailer}/overview?branch_id=x")) == (
            404, "not_found")


async def test_the_console_is_served_with_a_strict_policy_and_nothing_else(
    store: Store,
) -> None:
    async with client(app(store), "no-token") as anyone:  # the pages carry no data
        for path in ("/ui/", "/ui/inbox", "/ui/threads/x", "/ui/static/thread.js",
                     "/ui/static/style.css", "/ui/static/icon.svg"):
            response = await anyone.get(path)
            assert response.status_code == 200, path
            policy = response.headers["content-security-policy"]
            assert "script-src 'self'" in policy
            assert "default-src 'self'" in policy
            assert "frame-ancestors 'none'" in policy
            assert response.headers["x-content-type-options"] == "nosniff"
        for path in ("/ui/static/ui.py", "/ui/static/..%2Fui.py", "/ui/static/app.js",
                     "/ui/static/.hidden.js"):
            assert (await anyone.get(path)).status_code == 404, path
        svg_namespace = 'xmlns="http://www.w3.org/2000/svg"'  # a name, never fetched
        for name in FILES:  # nothing is fetched from elsewhere: no file names another origin
            text = (await anyone.get(f"/ui/static/{name}")).text.replace(svg_namespace, "")
            assert "://" not in text, name
