"""The docs site: ``mkdocs build --strict`` passes (no broken link, anchor or reference, every
page in the navigation), the built pages load nothing from another host (no web fonts, no CDN),
and in a real headless Chromium (Debian's ``chromium``, driven by playwright's client) one page
of each section renders, its navigation leads to another page, and search, run from the built
files, finds a word on the page that holds it."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from doc_blocks import DOCS, ROOT, block_env

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# One page of each section, a page its navigation links to, and that page's title.
SECTIONS = [
    ("index.html", "getting-started/install.html", "Install"),
    ("getting-started/demo.html", "getting-started/first-agent.html", "Your first agent"),
    ("concepts/effects-and-crashes.html", "concepts/parking.html", "Parking"),
    ("guides/tools.html", "guides/effect-classes.html", "Effect classes"),
    ("reference/errors.html", "reference/cli.html", "CLI"),
    ("production/crash-drills.html", "production/backups.html", "Backups"),
    ("internals/store.html", "internals/throughput.html", "Throughput"),
]
# A word that only one page holds, and that page: search must find it there.
SEARCH_WORD, SEARCH_PAGE = "materialize", "guides/shared-format.html"
EXTERNAL = re.compile(
    r"""<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.I
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=block_env(), capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.mark.timeout(600)
def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    pages = {p.relative_to(DOCS).with_suffix(".html") for p in DOCS.rglob("*.md")}
    built = {p.relative_to(site) for p in site.rglob("*.html")}
    assert pages <= built
    assert (site / "search" / "search_index.json").stat().st_size > 0


@pytest.mark.timeout(600)
def test_the_built_site_loads_nothing_from_another_host(site: Path) -> None:
    offenders = []
    for page in site.rglob("*.html"):
        text = page.read_text()
        offenders += [f"{page.relative_to(site)}: {m.group(0)}" for m in EXTERNAL.finditer(text)]
        if "fonts.googleapis" in text or "fonts.gstatic" in text:
            offenders.append(f"{page.relative_to(site)}: web fonts")
    for css in site.rglob("*.css"):
        if re.search(r"url\(\s*['\"]?(?:https?:)?//", css.read_text()):
            offenders.append(f"{css.relative_to(site)}: remote url() in a stylesheet")
    assert not offenders, offenders


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.timeout(600)
@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium package")
def test_each_section_renders_navigates_and_searches_in_chromium(served: str) -> None:
    from playwright.sync_api import Request, expect, sync_playwright

    elsewhere: list[str] = []
    errors: list[str] = []

    def only_loopback(route: object, request: Request) -> None:
        host = urlsplit(request.url).hostname
        if request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()  # type: ignore[attr-defined]
        else:
            elsewhere.append(request.url)
            route.abort()  # type: ignore[attr-defined]

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.route("**/*", only_loopback)
            page.on("pageerror", lambda error: errors.append(str(error)))
            for start, target, title in SECTIONS:
                page.goto(f"{served}/{start}")
                expect(page.locator("article h1").first).to_be_visible()
                nav = page.locator(f"nav.md-nav--primary a[href$='{Path(target).name}']")
                nav.first.click()
                expect(page).to_have_url(f"{served}/{target}")
                expect(page.locator("article h1").first).to_have_text(re.compile(title))

            page.goto(f"{served}/index.html")
            search = page.locator("input.md-search__input")
            search.click()
            search.fill(SEARCH_WORD)
            hits = page.locator(".md-search-result__item a")
            expect(hits.first).to_be_visible(timeout=30_000)
            hrefs = [hits.nth(i).get_attribute("href") or "" for i in range(hits.count())]
            assert any(SEARCH_PAGE in href for href in hrefs), hrefs
        finally:
            browser.close()
    assert not elsewhere, f"the site asked another host for {elsewhere}"
    assert not errors, errors
