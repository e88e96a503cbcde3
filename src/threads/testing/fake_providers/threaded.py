"""A fake provider served from a background thread, for tests whose clients are other processes
(drill workers, demo workers) while the test itself is plain blocking code.

``FakeInThread`` owns one event loop in one thread; every use of the fake (scripting, reading
what it received, waiting for a held stream) is handed to that loop, so the fake is only ever
touched from its own thread. Invariant: leaving the ``with`` block closes the server and joins
the thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from threads.testing.fake_providers.provider import FakeProvider
from threads.testing.fake_providers.script import Scripted
from threads.testing.fake_providers.server import RecordedRequest

T = TypeVar("T")
WAIT_S = 60.0


class FakeInThread:
    """``with FakeInThread(OpenAIFake) as fake:`` then ``fake.base_url``, ``fake.script(...)``,
    ``fake.wait_held()``, ``fake.requests()``."""

    def __init__(self, fake_type: type[FakeProvider]) -> None:
        self._fake = fake_type()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="fake-provider", daemon=True)

    def __enter__(self) -> FakeInThread:
        self._thread.start()
        if not self._ready.wait(WAIT_S) or self._failure is not None:
            raise RuntimeError(f"the fake provider did not start: {self._failure!r}")
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(WAIT_S)

    @property
    def base_url(self) -> str:
        return self._fake.base_url

    def script(self, *items: Scripted) -> None:
        async def add() -> None:
            self._fake.script(*items)

        self._call(add)

    def requests(self) -> list[RecordedRequest]:
        async def copy() -> list[RecordedRequest]:
            return list(self._fake.requests)

        return self._call(copy)

    def wait_held(self) -> None:
        """Block until a reply scripted with ``hold_after_events`` is held mid-stream."""
        self._call(self._fake.wait_held)

    def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        assert self._loop is not None

        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(WAIT_S)

    def _serve(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self._fake:
            self._ready.set()
            await self._stop.wait()
