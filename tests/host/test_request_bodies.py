"""Every host route that reads a JSON body reads it through one parser (``body_of``, on
``threads.log.input_json``): a body with a duplicate key, a number the log can't hold (``1e400``,
an integer past ±(2^53-1), NaN), a lone surrogate or nesting past 64 levels is 400
``invalid_request`` with nothing appended, and no body makes the host answer a 5xx.

The app runs in process (httpx's ASGI transport) over a real SQLite store, with one thread a
run completed (so bodies of the right shape reach the log). The property test builds bodies as
JSON text, marking each hostile construct it wrote: a marked body must be refused 400 by every
route, and an unmarked ``model_params`` the log can hold is recorded exactly as sent.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threads import Principal, agent
from threads.host.app import host
from threads.store.sqlite import SQLiteStore, sqlite
from threads.testing.scripted import say, scripted_model

pytestmark = pytest.mark.timeout(300)

ALICE = Principal(issuer="test", tenant="acme", subject="alice")
MODEL = '{"provider":"scripted","name":"scripted-1"}'
# Each route that reads a body, and a body of its shape around one value (``{}`` marks where).
ROUTES = {
    "runs": ("/v1/runs", '{"agent":"greeter","input":{}}'),
    "forks": ("{t}/forks", '{"event_id":{}}'),
    "approvals": ("{t}/approvals/c1", '{"decision":"deny","reason":{}}'),
    "answer": ("{t}/questions/c1/answer", '{"answer":{}}'),
    "resolve": ("{t}/parked/k1/resolve", '{"resolution":{}}'),
    "settings": ("{t}/settings", '{"model":' + MODEL + ',"model_params":{}}'),
    "mode": ("{t}/mode", '{"mode":{}}'),
}


@dataclass
class Host:
    loop: asyncio.AbstractEventLoop
    store: SQLiteStore
    http: httpx.AsyncClient
    app: Any
    thread_id: str

    def post(self, route: str, value: str) -> httpx.Response:
        """POST the route's body with ``value`` in its place."""
        return self.post_body(route, ROUTES[route][1].replace("{}", value, 1))

    def post_body(self, route: str, body: str) -> httpx.Response:
        path = ROUTES[route][0].format(t=f"/v1/threads/{self.thread_id}")
        return self.post_raw(path, body.encode())

    def post_raw(self, path: str, body: bytes) -> httpx.Response:
        async def send() -> httpx.Response:
            response = await self.http.post(path, content=body, headers={
                "content-type": "application/json", "idempotency-key": str(uuid.uuid4())})
            await self.settle()
            return response

        return self.loop.run_until_complete(send())

    async def settle(self) -> None:
        """Wait for the runs the host started (a new thread's run) to end."""
        await asyncio.gather(*self.app.state.runs.running.values(), return_exceptions=True)

    def lines(self) -> int:
        async def count() -> int:
            root = await self.store.root_branch(self.thread_id)
            return len(await self.store.stored_lines(root.branch_id))

        return self.loop.run_until_complete(count())

    def last_event(self) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            root = await self.store.root_branch(self.thread_id)
            chain = await self.store.read_chain(root.branch_id)
            return dict(json.loads(chain.events[-1].line))

        return self.loop.run_until_complete(read())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    loop = asyncio.new_event_loop()
    store = sqlite(Path(tmp_path_factory.mktemp("bodies")) / "store")
    greeter = agent(name="greeter", model=scripted_model([say("hi")]))
    app = host(store, [greeter], authenticate=lambda _request: ALICE)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host")
    served = Host(loop, store, http, app, "")
    first = served.post_raw("/v1/runs", b'{"agent":"greeter","input":"hi"}')
    assert first.status_code == 202, first.text
    served.thread_id = first.json()["thread_id"]
    try:
        yield served
    finally:
        loop.run_until_complete(http.aclose())
        loop.run_until_complete(store.close())
        loop.close()


def refused(response: httpx.Response) -> str:
    """The message of a 400 ``invalid_request`` (anything else fails the test)."""
    assert response.status_code == 400, (response.status_code, response.text)
    assert response.json()["error"]["code"] == "invalid_request", response.text
    return str(response.json()["error"]["message"])


def test_a_number_the_log_cant_hold_is_400_not_500(served: Host) -> None:
    before = served.lines()
    for number in ("1e400", "-1e400", "1e-400", "12345678901234567890", "-9007199254740992"):
        message = refused(served.post("settings", '{"temperature":' + number + "}"))
        assert number[:10] in message
    for constant in ("NaN", "Infinity", "-Infinity"):
        assert "not JSON" in refused(served.post("settings", '{"t":' + constant + "}"))
    assert served.lines() == before  # nothing was recorded
    accepted = served.post("settings", '{"temperature":1e308,"top_k":9007199254740991}')
    assert accepted.status_code == 200, accepted.text
    params = served.last_event()["data"]["settings"]["model_params"]
    assert params == {"temperature": 1e308, "top_k": 9007199254740991}


def test_duplicate_keys_are_refused_by_every_route(served: Host) -> None:
    before = served.lines()
    for route, (_, shape) in ROUTES.items():
        body = shape.replace("{}", '"x"', 1).replace("{", '{"x":1,"x":1,', 1)
        assert "duplicate object key 'x'" in refused(served.post_body(route, body)), route
    model_twice = '{"model":' + MODEL + ',"model":{"provider":"other","name":"other"}}'
    assert "duplicate" in refused(served.post_body("settings", model_twice))
    assert "duplicate" in refused(served.post("settings", '{"temperature":1,"temperature":2}'))
    assert served.lines() == before


def test_lone_surrogates_and_deep_nesting_are_refused(served: Host) -> None:
    before = served.lines()
    for route in ROUTES:
        assert "surrogate" in refused(served.post(route, '"a\\ud800b"')), route
        assert "deeper than 64" in refused(served.post(route, "[" * 100_000 + "]" * 100_000))
    assert "surrogate" in refused(served.post("settings", '{"\\udfff":1}'))
    assert "UTF-8" in refused(served.post_raw("/v1/runs", b'{"agent":"greeter","input":"\xff"}'))
    assert served.lines() == before


# ---- the property: no body is a 5xx, and every marked construct is a 400 ----------------------

HOSTILE_NUMBERS = ["1e400", "-1e999", "1e-400", "NaN", "Infinity", "-Infinity",
                   "9007199254740992", "-123456789012345678901234567890"]


@dataclass(frozen=True)
class Text:
    """A JSON text and whether it holds a construct the host must refuse."""

    text: str
    hostile: bool = False


def _join(parts: list[Text], open_: str, close: str) -> Text:
    return Text(open_ + ",".join(p.text for p in parts) + close, any(p.hostile for p in parts))


def _object(pairs: list[tuple[str, Text]]) -> Text:
    keys = [key for key, _ in pairs]
    body = _join([Text(json.dumps(k) + ":" + v.text, v.hostile) for k, v in pairs], "{", "}")
    return Text(body.text, body.hostile or len(set(keys)) != len(keys))


SCALARS = st.one_of(
    st.sampled_from(["null", "true", "false"]).map(Text),
    st.integers(-(2**53) + 1, 2**53 - 1).map(lambda n: Text(str(n))),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: Text(repr(x))),
    st.text(max_size=20).map(lambda s: Text(json.dumps(s))),
    st.sampled_from(HOSTILE_NUMBERS).map(lambda s: Text(s, hostile=True)),
    st.sampled_from(['"\\ud800"', '"x\\udc00"']).map(lambda s: Text(s, hostile=True)),
    st.integers(65, 300).map(lambda n: Text("[" * n + "]" * n, hostile=True)),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda parts: _join(parts, "[", "]")),
        st.lists(st.tuples(st.sampled_from("abc"), inner), max_size=4).map(_object),
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, database=None)
@given(route=st.sampled_from(sorted(ROUTES)), value=VALUES)
def test_no_body_is_a_5xx_and_every_hostile_one_is_refused(
    served: Host, route: str, value: Text
) -> None:
    response = served.post(route, value.text)
    assert response.status_code < 500, (route, value, response.text)
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"code", "message"}
    if value.hostile:
        refused(response)
    elif route == "settings" and value.text.startswith("{") and response.status_code == 200:
        recorded = served.last_event()["data"]["settings"]["model_params"]
        assert recorded == json.loads(value.text)
