"""The documentation site (mkdocs.yml, docs/*.md) builds in strict mode, and strict mode bites.

The real build: `python -m mkdocs build --strict` on the repository's own config must exit 0 and
turn every page of the nav into an HTML file whose images are there. Strict mode fails on any
warning, and mkdocs.yml makes a link to a missing page or to a heading a page lacks a warning: a
copy of the site with such links must fail to build, naming them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

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


def test_the_docs_site_builds_strict_with_every_page(tmp_path):
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["theme"]["name"] == "material"
    pages = nav_pages(config["nav"])
    # every page in docs/ is in the nav, once
    assert sorted(pages) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    proc = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for page in pages:
        html = tmp_path / "site" / page.replace(".md", ".html")
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
