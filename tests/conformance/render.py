"""The ``render`` kind: import a log, replay its recorded requests, render the next one.

Per case: a fresh SQLite store on the case's clock, the case's ``artifacts/<sha256>`` stored,
``import_log`` (the reader's rules, C7 among them), then ``Thread.replay()`` (every recorded
model request re-rendered and compared with its ``request_ref`` / ``declared_prefix``), then
the next request the log implies, rendered with the artifacts the store holds. Compared: the
outcome / ``error{code, seq}`` (from the import, the replay or the next render, in that order),
the state as a reader, and the next request: its sha256 and declared prefix, and its exact
bytes against ``request.bytes`` when the case ships it.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from recover import _lines, _principal
from runner import Case, Expected, _compare_error, _compare_state, load_expected

from threads.clock import FakeClock
from threads.errors import LogError
from threads.log.hashing import sha256_hex
from threads.log.render import render
from threads.log.replay import needed_artifacts
from threads.run.thread import Thread
from threads.store.sqlite import sqlite
from threads.store.transfer import import_log


def run_render(case: Case) -> Expected:
    expected = load_expected(case)
    with tempfile.TemporaryDirectory(prefix="threads-render-") as tmp:
        asyncio.run(_run(case, expected, Path(tmp)))
    return expected


async def _run(case: Case, expected: Expected, tmp: Path) -> None:
    now = case.spec["clock"]["now"]
    data = case.log_path().read_bytes()
    store = sqlite(tmp / "store", clock=FakeClock(now))
    try:
        folder = case.path / "artifacts"
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            ref = await store.put_artifact(path.read_bytes(), "application/octet-stream")
            assert ref["sha256"] == path.name, f"artifact {path.name} does not hash to its name"
        try:
            imported = await import_log(store, data, tenant_id=_principal(_lines(data)).tenant)
        except LogError as err:
            _compare_error(expected, err)
            return
        replayed = await Thread(store, imported.thread_id).replay()
        if replayed.mismatch is not None:
            mismatch = replayed.mismatch
            _compare_error(expected, LogError(mismatch.code, mismatch.message, seq=mismatch.seq))
            return
        chain = await store.read_chain(imported.branch_id)
        fold = chain.fold(now)
        artifacts = {}
        for sha256 in needed_artifacts(chain.events):
            if (folder / sha256).exists():
                artifacts[sha256] = await store.get_artifact(sha256)
        assert fold.thread_started is not None, "a render case's log starts a thread"
        try:
            rendered = render(fold.thread_started, chain.events, artifacts)
        except LogError as err:
            _compare_error(expected, err)
            return
        assert expected.doc["outcome"] == "ok", (
            f"the log replayed and rendered, expected error {expected.doc.get('error')}"
        )
        if "state" in expected.doc:
            _compare_state(expected, fold.state())
        want = expected.doc["render"]
        request_bytes = case.path / "request.bytes"
        if request_bytes.exists():
            wanted = request_bytes.read_bytes()
            assert sha256_hex(wanted) == want["next_request_sha256"], (
                "data mismatch: request.bytes does not hash to next_request_sha256"
            )
            assert rendered.data == wanted, _first_difference(rendered.data, wanted)
        assert sha256_hex(rendered.data) == want["next_request_sha256"], "next request differs"
        assert rendered.declared_prefix() == want["declared_prefix"], "declared prefix differs"
    finally:
        await store.close()


def _first_difference(got: bytes, want: bytes) -> str:
    got_lines, want_lines = got.split(b"\n"), want.split(b"\n")
    for number, (a, b) in enumerate(zip(got_lines, want_lines, strict=False)):
        if a != b:
            return f"line {number} differs:\n  got  {a!r:.400}\n  want {b!r:.400}"
    return f"{len(got_lines)} lines rendered, {len(want_lines)} expected"
