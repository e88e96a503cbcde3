"""Verify and import report a log's first failure by seq, as the reference does: an artifact the
log needs at seq 3 (an injected attachment by ``ref``) that neither the bundle nor the store
holds wins over a ``prefix_changed`` at seq 8; with the artifact at hand the prefix failure is
the one reported. A bundle lacking an artifact, and a stored branch whose artifact is gone, name
the seq of the first event referencing it. Both stores."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from threads.cli.cmd_verify import verify_branch, verify_file
from threads.errors import ThreadsError
from threads.log.hashing import sha256_hex
from threads.log.render import render
from threads.store.bundle import write_bundle
from threads.store.protocol import Store
from threads.store.transfer import import_log

sys.path.insert(0, str(Path(__file__).parent.parent / "log"))
from test_reader_rules import Log

NOTES = b"# Notes\nship on Friday\n"
NOTES_REF = {"bytes": len(NOTES), "media_type": "text/plain", "sha256": sha256_hex(NOTES)}
TENANT = "local"


def notes_log(*, broken_prefix: bool, stored: dict[str, bytes] | None = None) -> Log:
    """seq 3 injects NOTES by ref; seq 4 requests with NOTES rendered; seq 8 (a second turn's
    request) declares a wrong line 0 when ``broken_prefix``. ``stored`` gets every artifact."""
    log = Log()
    log.user()
    log.add("injected", {"origin": {"id": "notes.md"}, "ref": NOTES_REF, "source": "attachment",
                         "trust": "untrusted_reference"})
    artifacts = {NOTES_REF["sha256"]: NOTES}
    first = render(log.events[0].data, log.events, artifacts)
    request = log.add("model_request", {"attempt": 1, "declared_prefix": first.declared_prefix(),
                                        "request_ref": first.request_ref()})
    log.respond(request)
    log.done()
    log.user("and now?")
    second = render(log.events[0].data, log.events, artifacts)
    prefix = second.declared_prefix()
    if broken_prefix:
        prefix = {**prefix, "bytes": prefix["bytes"] + 1}
    log.add("model_request", {"attempt": 1, "declared_prefix": prefix,
                              "request_ref": second.request_ref()})
    assert [e.seq for e in log.events if e.type in ("injected", "model_request")] == [3, 4, 8]
    if stored is not None:
        stored.update(artifacts)
        stored.update({first.sha256: first.data, second.sha256: second.data})
    return log


async def test_import_reports_the_missing_artifact_before_a_later_failure(store: Store) -> None:
    data = notes_log(broken_prefix=True).log.export()
    with pytest.raises(ThreadsError) as refused:
        await import_log(store, data, tenant_id=TENANT)
    assert (refused.value.code, refused.value.seq) == ("artifact_missing", 3)
    assert await store.list_threads() == []
    await store.put_artifact(NOTES, "text/plain")  # at hand now: the later failure shows
    with pytest.raises(ThreadsError) as refused:
        await import_log(store, data, tenant_id=TENANT)
    assert (refused.value.code, refused.value.seq) == ("prefix_changed", 8)


async def test_a_bundle_reports_the_first_failure_by_seq(store: Store, tmp_path: Path) -> None:
    broken = write_bundle(notes_log(broken_prefix=True).log.export(), {})
    whole = notes_log(broken_prefix=False).log.export()
    lacking = write_bundle(whole, {})
    path = tmp_path / "bundle.tar"
    for bundle, seq in ((broken, 3), (lacking, 3)):
        with pytest.raises(ThreadsError) as refused:
            await import_log(store, bundle, tenant_id=TENANT)
        assert (refused.value.code, refused.value.seq) == ("artifact_missing", seq)
        path.write_bytes(bundle)
        with pytest.raises(ThreadsError) as refused:
            await verify_file(path)
        assert (refused.value.code, refused.value.seq) == ("artifact_missing", seq)
    everything: dict[str, bytes] = {}
    complete = notes_log(broken_prefix=False, stored=everything).log.export()
    path.write_bytes(write_bundle(complete, everything))
    assert await verify_file(path) == 0
    requests_only = {sha: data for sha, data in everything.items() if data != NOTES}
    path.write_bytes(write_bundle(complete, requests_only))
    with pytest.raises(ThreadsError) as refused:
        await verify_file(path)
    assert (refused.value.code, refused.value.seq) == ("artifact_missing", 3)


async def test_a_stored_branch_names_the_seq_of_its_missing_artifact(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    everything: dict[str, bytes] = {}
    data = notes_log(broken_prefix=False, stored=everything).log.export()
    for artifact in everything.values():
        if artifact != NOTES:  # the stored requests are there, the attachment is not
            await store.put_artifact(artifact, "application/x-ndjson")
    imported = await import_log(store, data, tenant_id=TENANT)
    assert imported.missing_artifacts == (NOTES_REF["sha256"],)
    branch = await store.get_branch(imported.branch_id)
    assert await verify_branch(store, branch) is False
    assert "FAILED artifact_missing: at seq 3:" in capsys.readouterr().out
