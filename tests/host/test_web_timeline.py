"""The web timeline in a real headless Chromium (Debian's ``chromium``, driven by playwright's
client): open a thread parked on an effect nobody can prove, see the parked call and its
arguments, click "it happened", and watch the run finish. A screenshot is kept under
``$THREADS_ARTIFACTS`` (default: the test's tmp directory, ``artifacts/``)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from host_support import HostServer, sse

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium package"),
]


def artifacts_dir(tmp_path: Path) -> Path:
    root = Path(os.environ.get("THREADS_ARTIFACTS", tmp_path / "artifacts"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def test_resolve_a_parked_effect_from_the_web_page(server: HostServer, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    alice = server.client()
    response = alice.post("/v1/runs", json={"agent": "mailer", "input": "mail the receipt"},
                          headers={"idempotency-key": str(uuid.uuid4())})
    accepted = response.json()
    tid = accepted["thread_id"]
    messages = sse(alice, f"/v1/threads/{tid}/runs/{accepted['run_id']}/events")
    assert messages[-1]["data"]["result"]["status"] == "parked"
    shots = artifacts_dir(tmp_path)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"{server.url}/ui/threads/{tid}#token=alice-token")
            assert "token" not in page.url  # the token left the address bar at once
            card = page.locator("#pending .card")
            expect(card).to_contain_text("did send_email happen? (effect_unknown)")
            expect(card).to_contain_text("c@example.com")  # the call's arguments
            expect(page.locator("#events li.parked")).to_have_count(1)
            expect(page.locator("#events li.user_input .who")).to_contain_text("alice")
            page.screenshot(path=str(shots / "web-timeline-parked.png"), full_page=True)

            page.locator("button.resolve-done").click()
            expect(page.locator("#result")).to_have_text("run completed: mailed", timeout=30_000)
            expect(page.locator("#events li.effect_resolved .who")).to_contain_text("alice")
            expect(page.locator("#events li.turn_completed")).to_have_count(1)
            expect(page.locator("#pending")).to_contain_text("nothing")
            page.screenshot(path=str(shots / "web-timeline-resolved.png"), full_page=True)

            page.goto(f"{server.url}/ui/")  # the list, with the token kept for this tab
            expect(page.locator(f"a[href='/ui/threads/{tid}']")).to_have_count(1)
        finally:
            browser.close()
    assert (shots / "web-timeline-resolved.png").stat().st_size > 0
    entries = alice.get(f"/v1/threads/{tid}/timeline").json()["entries"]
    assert entries[-1]["event"]["type"] == "turn_completed"
