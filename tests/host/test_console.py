"""The operator console in a real headless Chromium (Debian's ``chromium``, driven through
playwright's client) against a real ``threads serve``, with the runs made by library runs of
``console_agents`` in another process on the same store.

What a person does there: sees an approval in the inbox, opens its thread and approves it by
keyboard, and the run finishes; watches a run another process is writing, live, through a
host restart; resolves a parked effect through the confirmation that says what may happen
twice; answers a question, sends a message, cancels, forks at a snapshot; and sees a refused
action's code in words. A tool result holding markup and a ``javascript:`` link is shown as
text. Every wait is on a condition of the page, never a sleep. Screenshots of the inbox and of
a thread page are written under ``$THREADS_ARTIFACTS`` (default: the test's tmp directory).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_support import finished, library_run, run_to_rest
from host_support import HostServer

from threads.testing.fake_service import FakeService

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium package"),
]
WAIT_MS = 30_000  # the longest a page condition may take on a loaded machine


def shots_dir(tmp_path: Path) -> Path:
    root = Path(os.environ.get("THREADS_ARTIFACTS", tmp_path / "console"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def shot(page: Any, path: Path, *, full_page: bool = True) -> None:
    page.screenshot(path=str(path), full_page=full_page)
    print(f"screenshot: {path}")
    assert path.stat().st_size > 0


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


class Watched:
    """A page, and what it did that it must not: script errors, dialogs (an alert a log
    smuggled in), requests anywhere but the host, the token anywhere but the API's header."""

    def __init__(self, browser: Any, server: HostServer, token: str) -> None:
        from playwright.sync_api import expect

        self.expect = expect
        expect.set_options(timeout=WAIT_MS)
        self.server, self.token = server, token
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(f"script error: {error}"))
        self.page.on("dialog", lambda dialog: self.errors.append(f"dialog: {dialog.message}"))
        self.page.on("request", self._request)
        # A refused request is logged by the browser and shown (and checked) on the page;
        # any other console error (a CSP violation, say) is a failure.
        self.page.on("console", lambda m: m.type == "error"
                     and not m.text.startswith("Failed to load resource")
                     and self.errors.append(f"console: {m.text}"))

    def _request(self, request: Any) -> None:
        if not request.url.startswith(self.server.url + "/"):
            self.errors.append(f"request elsewhere: {request.url}")
        if self.token in request.url:
            self.errors.append(f"token in a URL: {request.url}")
        header = request.headers.get("authorization")
        if header is not None and "/v1/" not in request.url:
            self.errors.append(f"authorization sent to {request.url}")

    def open(self, path: str) -> Any:
        self.page.goto(f"{self.server.url}{path}#token={self.token}")
        assert self.token not in self.page.url  # the token left the address bar at once
        return self.page

    def close(self) -> None:
        self.context.close()
        assert self.errors == []


@pytest.fixture
def watched(browser: Any, console_server: HostServer) -> Iterator[Any]:
    opened: list[Watched] = []

    def make(token: str = "alice-token") -> Watched:
        opened.append(Watched(browser, console_server, token))
        return opened[-1]

    yield make
    for one in opened:
        one.close()


def parked_page(server: HostServer, watched: Any, agent: str, text: str) -> tuple[str, Any, Any]:
    """A library run of ``agent`` in another process, and alice's page of its thread."""
    tid = run_to_rest(server, agent, text)
    view = watched()
    return tid, view, view.open(f"/ui/threads/{tid}")


def tab_to(page: Any, selector: str, most: int = 80) -> None:
    """Press Tab until ``selector`` has the focus: it is reachable by keyboard."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{selector} is not reachable with Tab")


def test_approve_from_the_inbox_by_keyboard_and_the_run_finishes(
    console_server: HostServer, watched: Any, tmp_path: Path
) -> None:
    tid = run_to_rest(console_server, "clerk", "Pay invoice INV-7")
    mailer = run_to_rest(console_server, "mailer", "Mail the receipt")
    asker = run_to_rest(console_server, "asker", "Pick a colour")
    shots = shots_dir(tmp_path)
    view = watched()
    page = view.open("/ui/inbox")
    expect = view.expect
    expect(page.locator("#inbox li.card")).to_have_count(3)
    parked = page.locator(f"#inbox li.card.effect[data-thread='{mailer}']")
    expect(parked).to_contain_text("What threads proved: send_email was sent and timed out")
    expect(parked).to_contain_text("What it could not prove: send_email is unguarded")
    expect(parked).to_contain_text("happens twice")
    expect(page.locator(f"#inbox li.card.question[data-thread='{asker}']")).to_contain_text(
        "Which colour?")
    card = page.locator(f"#inbox li.card.approval[data-thread='{tid}']")
    expect(card).to_contain_text("Approve wire_money?")
    expect(card).to_contain_text('"to": "ACME GmbH"')  # the arguments, pretty-printed
    expect(card).to_contain_text("unguarded")
    expect(card).to_contain_text("alice (test/acme)")  # who asked
    expect(card).to_contain_text("in 60 min")  # when it expires
    shot(page, shots / "console-inbox.png")
    stranger = watched("eve-token").open("/ui/inbox")  # another tenant of the same host
    expect(stranger.locator("#empty")).to_be_visible()
    assert stranger.locator("#inbox li").count() == 0

    challenge = console_server.client().get(f"/v1/threads/{tid}/approvals").json()[0][
        "challenge_id"]
    card.get_by_role("link", name="Decide on the thread").click()
    expect(page).to_have_url(f"{console_server.url}/ui/threads/{tid}#item-{challenge}")
    pending = page.locator("#pending article.card.approval")
    expect(pending).to_be_focused()  # the link lands on the decision

    # A tool result holding markup and a javascript: link is text, nothing more.
    lookup = page.locator("li.call", has_text="look_up_invoice")
    lookup.locator("summary").click()
    expect(lookup.locator("pre.result-text")).to_contain_text(
        '<script>document.title="pwned"</script>')
    expect(lookup.locator("pre.result-text")).to_contain_text('javascript:document.title="pwned"')
    smuggled = "#conversation img, #conversation script, a[href^='javascript']"
    assert page.locator(smuggled).count() == 0

    # The model call: its duration, usage and cost.
    first = page.locator("#conversation li.msg.assistant").first
    expect(first).to_contain_text("812 in / 41 out tokens")
    expect(first).to_contain_text("USD 0.003051")

    tab_to(page, "button.approve")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"  # the focus is visible
    page.keyboard.press("Enter")
    expect(page.locator("#conversation li.note.turn_completed")).to_have_count(1)
    expect(page.locator("#conversation")).to_contain_text("Paid INV-7: 120 EUR to ACME GmbH.")
    granted = page.locator("#conversation li.note.approval_granted")
    expect(granted).to_contain_text("alice (test/acme)")  # who decided
    expect(page.locator("#pending")).to_contain_text("Nothing waits for a decision.")
    expect(page.locator("#facts")).to_contain_text("idle")
    assert page.title() != "pwned"
    shot(page, shots / "console-thread.png")

    page.locator("#raw-toggle").click()  # the stored events, one click away
    expect(page.locator("#raw-view")).to_be_visible()
    expect(page.locator("#raw tbody tr.approval_granted")).to_have_count(1)
    entries = console_server.client().get(f"/v1/threads/{tid}/timeline").json()["entries"]
    assert entries[-1]["event"]["type"] == "turn_completed"
    expect(page.locator("#raw tbody tr")).to_have_count(len(entries))


def test_the_page_follows_a_run_in_another_process_through_a_host_restart(
    console_server: HostServer, service: FakeService, watched: Any
) -> None:
    process, tid = library_run(console_server, "watcher", "Watch the gates")
    try:
        view = watched()
        page = view.open(f"/ui/threads/{tid}")
        expect = view.expect
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        calls = page.locator("#conversation li.call")
        expect(calls).to_have_count(1)
        service.client().open_gate("first")  # the other process writes on; no reload here
        expect(calls).to_have_count(2)
        expect(calls.first).to_contain_text("done")

        console_server.stop()  # the connection drops
        expect(page.locator("#live")).to_have_attribute("data-state", "reconnecting")
        service.client().open_gate("second")
        assert finished(process) == "completed"  # while the host was down
        console_server.start()
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        expect(page.locator("#conversation")).to_contain_text("Both gates opened.")
        expect(page.locator("#conversation li.note.turn_completed")).to_have_count(1)
        entries = console_server.client().get(f"/v1/threads/{tid}/timeline").json()["entries"]
        seqs = page.locator("#raw tbody tr").evaluate_all(
            "(rows) => rows.map((r) => Number(r.dataset.seq))")
        assert seqs == [e["event"]["seq"] for e in entries]  # each once, none missed
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_a_park_is_resolved_through_the_confirmation(
    console_server: HostServer, watched: Any, tmp_path: Path
) -> None:
    tid, view, page = parked_page(console_server, watched, "mailer", "Mail the receipt")
    expect = view.expect
    card = page.locator("#pending article.card.effect")
    expect(card).to_contain_text("Did send_email happen?")
    expect(card).to_contain_text("timed out before the provider answered")
    expect(card).to_contain_text("no lookup and no deduplication")
    expect(card).to_contain_text("happens twice")

    def resolutions() -> list[str]:
        entries = console_server.client().get(f"/v1/threads/{tid}/timeline").json()["entries"]
        return [e["event"]["data"]["outcome"] for e in entries
                if e["event"]["type"] == "effect_resolved"]

    card.locator("button.resolve-not-done").click()
    dialog = page.locator("#confirm")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("This may happen twice")
    expect(dialog).to_contain_text('"to": "c@example.com"')
    expect(page.locator("#confirm-no")).to_be_focused()  # the safe choice is the default
    shot(page, shots_dir(tmp_path) / "console-confirm.png", full_page=False)  # the modal
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert resolutions() == []  # nothing was recorded

    card.locator("button.resolve-not-done").click()
    page.locator("#confirm-yes").click()
    resolved = page.locator("#conversation li.note.effect_resolved")
    expect(resolved).to_contain_text("assume_not_done")
    expect(resolved).to_contain_text("alice (test/acme)")
    expect(page.locator("#conversation")).to_contain_text("Mailed the receipt.")
    assert resolutions() == ["assume_not_done"]


def test_answer_send_cancel_fork_and_a_refusal_in_words(
    console_server: HostServer, watched: Any, tmp_path: Path
) -> None:
    _, view, page = parked_page(console_server, watched, "asker", "Pick a colour")
    expect = view.expect
    card = page.locator("#pending article.card.question")
    expect(card).to_contain_text("Which colour?")
    card.locator("button.answer").click()  # nothing picked: the host refuses it
    expect(card.locator(".refusal code")).to_have_text("invalid_request")
    expect(card.locator(".refusal")).to_contain_text("refused the request as malformed")
    card.get_by_label("blue").check()
    card.locator("button.answer").click()
    expect(page.locator("#conversation")).to_contain_text("Blue it is.")

    # Bob, of alice's tenant, may not decide for her thread: the page says so, then the host.
    clerk = run_to_rest(console_server, "clerk", "Pay invoice INV-8")
    bob = watched("bob-token").open(f"/ui/threads/{clerk}")
    refused = bob.locator("#pending article.card.approval")
    expect(refused).to_contain_text("the host will refuse you")
    refused.locator("button.approve").click()
    expect(refused.locator(".refusal code")).to_have_text("forbidden")
    expect(refused.locator(".refusal")).to_contain_text("You may not make this decision")

    # Alice cancels that parked turn instead.
    page.goto(f"{console_server.url}/ui/threads/{clerk}")
    expect(page.locator("#pending article.card.approval")).to_be_visible()
    page.locator("#cancel").click()
    expect(page.locator("#conversation li.note.cancel_requested")).to_contain_text("alice")
    expect(page.locator("#conversation li.note.turn_completed")).to_contain_text("cancelled")

    # Deny, with a reason; and a parked effect that did happen.
    denied = run_to_rest(console_server, "clerk", "Pay invoice INV-9")
    page.goto(f"{console_server.url}/ui/threads/{denied}")
    card = page.locator("#pending article.card.approval")
    card.get_by_label("reason").fill("INV-9 was paid by hand")
    card.locator("button.deny").click()
    expect(page.locator("#conversation li.note.approval_denied")).to_contain_text(
        "INV-9 was paid by hand")
    expect(page.locator("#conversation li.note.turn_completed")).to_have_count(1)
    mailed = run_to_rest(console_server, "mailer", "Mail it once")
    page.goto(f"{console_server.url}/ui/threads/{mailed}")
    page.locator("#pending button.resolve-done").click()
    expect(page.locator("#conversation li.note.effect_resolved")).to_contain_text("assume_done")
    expect(page.locator("#conversation")).to_contain_text("Mailed the receipt.")

    greeter = run_to_rest(console_server, "greeter", "Hello")
    page.goto(f"{console_server.url}/ui/threads/{greeter}")
    expect(page.locator("#conversation")).to_contain_text("Hello 1.")
    page.locator("#message").fill("And again?")
    page.locator("#message-form button").click()
    expect(page.locator("#conversation li.msg.user").nth(1)).to_contain_text("And again?")
    expect(page.locator("#conversation")).to_contain_text("Hello 2.")

    forkable = _imported_with_a_snapshot(console_server, tmp_path)
    page.goto(f"{console_server.url}/ui/threads/{forkable}")
    fork = page.locator("#conversation li[data-snapshot] button.fork")
    expect(fork).to_be_visible()
    fork.click()
    page.locator("#new-branch").click()
    expect(page.locator("#conversation li.note.fork")).to_contain_text("Forked from branch")
    expect(page.locator("#facts")).not_to_contain_text("root")


def _imported_with_a_snapshot(server: HostServer, tmp_path: Path) -> str:
    """A thread of agent ``demo`` (whose sandbox restores) ending at a snapshot, imported into
    the host's store by ``threads import`` (another process)."""
    from threads.clock import SystemClock
    from threads.testing.sample_log import SampleLog

    log = SampleLog(SystemClock())
    log.started()
    log.turn()
    log.snapshot()
    exported = tmp_path / "forkable.jsonl"
    exported.write_bytes(log.export())
    subprocess.run(
        [sys.executable, "-m", "threads.cli", "import", str(exported), "--store",
         str(server.store), "--tenant", "acme"],
        check=True, capture_output=True, timeout=60,
    )
    return log.header.thread_id


def test_the_thread_list_filters_pages_and_opens_a_thread(
    console_server: HostServer, watched: Any
) -> None:
    run_to_rest(console_server, "greeter", "Hello before")
    greeted = run_to_rest(console_server, "greeter", "Hello from the list")
    parked = run_to_rest(console_server, "mailer", "Mail the list receipt")
    view = watched()
    expect = view.expect
    page = view.open("/ui/?limit=2")
    rows = page.locator("#threads tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first.locator("td").nth(3)).to_contain_text("parked")  # parked first
    page.locator("#next-page").click()  # the host's next page
    expect(page.locator("#prev-page")).to_be_enabled()
    expect(rows.first).not_to_have_attribute("data-thread", parked)

    page.locator("#status").select_option("idle")
    expect(rows.first.locator("td").nth(3)).to_contain_text("idle")
    page.locator("#q").fill(greeted[-12:])
    page.locator("#filters button[type=submit]").click()
    row = page.locator(f"#threads tbody tr[data-thread='{greeted}']")
    expect(rows).to_have_count(1)
    expect(row).to_contain_text("greeter")
    expect(row).to_contain_text("Hello from the list")  # the first user message
    expect(row).to_contain_text("no price")
    assert "status=idle" in page.url
    assert greeted[-12:] in page.url
    row.get_by_role("link").click()
    expect(page.locator("#conversation")).to_contain_text("Hello from the list")


def test_a_handoff_links_the_two_threads_both_ways(
    console_server: HostServer, watched: Any
) -> None:
    source = run_to_rest(console_server, "triage", "Please pass me on")
    view = watched()
    expect = view.expect
    page = view.open(f"/ui/threads/{source}")
    handoff = page.locator("#conversation li.note.handoff")
    expect(handoff).to_contain_text("Handed off to helper")
    link = handoff.locator("a.thread-link")
    target = link.get_attribute("data-thread")
    assert target is not None
    link.click()
    expect(page.locator("#conversation")).to_contain_text("The helper took it from here.")
    started = page.locator("#conversation li.note.thread_started")
    expect(started).to_contain_text("handed off from")
    expect(started.locator("a.thread-link")).to_have_attribute("data-thread", source)
    assert target in page.url
