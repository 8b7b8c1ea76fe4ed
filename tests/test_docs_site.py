"""The documentation site (mkdocs.yml, docs/*.md) builds in strict mode, and strict mode bites.

The real build: `python -m mkdocs build --strict` on the repository's own config must exit 0 and
turn every page of the nav into an HTML file whose images are there. Strict mode fails on any
warning, and mkdocs.yml makes a link to a missing page or to a heading a page lacks a warning: a
copy of the site with such links must fail to build, naming them. The built pages, opened in a
headless Chromium 1400 px wide, show all they hold: no table or code block runs out of sight.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    # the banner about MkDocs 2 is noise here
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def nav_pages(nav: list) -> list[str]:
    """The markdown files a mkdocs nav lists, nested sections included."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The repository's own site, built once for the tests that read it."""
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = build(ROOT / "mkdocs.yml", site)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return site


def test_the_docs_site_builds_strict_with_every_page(site):
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["theme"]["name"] == "material"
    pages = nav_pages(config["nav"])
    # every page in docs/ is in the nav, once
    assert sorted(pages) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    for page in pages:
        html = site / page.replace(".md", ".html")
        assert html.is_file(), f"{page} was not built"
        # every image the page shows was copied next to it
        for src in re.findall(r'<img[^>]* src="([^"]+)"', html.read_text(encoding="utf-8")):
            assert (html.parent / src).is_file(), f"{page}: missing image {src}"


def test_strict_mode_fails_on_a_link_to_a_missing_page_or_heading(tmp_path):
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    usage = tmp_path / "docs" / "usage.md"
    usage.write_text(
        usage.read_text(encoding="utf-8")
        + "\nSee [a page](no_such_page.md) and [a heading](training.md#no-such-heading).\n",
        encoding="utf-8",
    )
    proc = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "no_such_page.md" in said and "#no-such-heading" in said
    assert "in strict mode" in said
    # the same page without the two links builds: they alone failed it
    usage.write_text((ROOT / "docs" / "usage.md").read_text(encoding="utf-8"), encoding="utf-8")
    assert build(tmp_path / "mkdocs.yml", tmp_path / "site").returncode == 0


# what runs out of sight in a page: a table's scroll box, a code block, the content column
HIDDEN = """() => Array.from(
  document.querySelectorAll('.md-typeset__scrollwrap, .md-typeset pre > code, .md-content'))
  .filter(el => el.scrollWidth > el.clientWidth + 1)
  .map(el => `${el.scrollWidth - el.clientWidth} px hidden: ${el.innerText.slice(0, 70)}`)"""


def _chromium() -> str:
    """A Chromium to drive (the distribution's package; .ci/run installs it where apt-get can)."""
    pytest.importorskip("playwright", reason="needs playwright (the dev extra)")
    found = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if found is None:
        pytest.skip("needs a Chromium on PATH (apt-get install chromium; .ci/run does where it can)")
    return found


def test_every_page_shows_its_tables_and_code_whole_at_1400_px(site):
    from playwright.sync_api import sync_playwright

    chromium = _chromium()
    hidden = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        pages = sorted(site.glob("*.html"))
        assert len(pages) > 20
        for html in pages:
            page.goto(html.as_uri())
            assert page.locator(".md-content").count() == 1, html.name  # a real page, styled
            if found := page.evaluate(HIDDEN):
                hidden[html.name] = found
        browser.close()
    assert not hidden, hidden
