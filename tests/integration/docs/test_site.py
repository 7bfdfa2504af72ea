"""The documentation site as a reader's browser shows it: every page renders in headless Chromium with
no console error, every mermaid diagram is drawn, and the main pages are photographed.

The site is built strict, as `make docs` builds it, and served on loopback with mermaid from the file the
theme's CDN serves (:mod:`devtools.docsite`). Screenshots go to ``RECLAIM_DOCS_SCREENSHOTS`` when it names
a folder, else to the test's temporary directory.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools import docsite
from tests.support.paths import REPO
from tests.support.servers import started

pytestmark = pytest.mark.integration

DOCS = REPO / "docs"

#: Every page of the site, as its path under the site's root (``concepts/pipeline/``).
PAGES = sorted(
    "" if md == DOCS / "index.md"
    else f"{md.parent.relative_to(DOCS)}/" if md.name == "index.md"
    else f"{md.relative_to(DOCS).with_suffix('')}/"
    for md in DOCS.rglob("*.md") if "hooks" not in md.relative_to(DOCS).parts)

#: The pages a new reader opens first, and those with diagrams.
MAIN_PAGES = ("", "getting-started/", "concepts/pipeline/", "concepts/segments-streams/",
              "concepts/retention/", "operations/security/", "performance/", "status/")

_DIAGRAM_SOURCE = re.compile(r'<pre class="mermaid">')
# The theme replaces each drawn diagram's <pre class="mermaid"> by a <div class="mermaid"> that holds the
# svg in a closed shadow root, only once mermaid has rendered it; a diagram mermaid refuses stays a <pre>.
_DIAGRAM_DRAWN = re.compile(r'<div class="mermaid"></div>')


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
                          cwd=REPO, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-3000:]}"
    return site


@pytest.fixture(scope="module")
def site(built_site: Path) -> Iterator[docsite.DocSite]:
    browser, mermaid = started("headless Chromium and mermaid", docsite.find)
    with docsite.serve(built_site, browser, mermaid) as served:
        yield served


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    named = os.environ.get("RECLAIM_DOCS_SCREENSHOTS")
    folder = Path(named) if named else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_every_page_of_the_sources_is_checked() -> None:
    assert "concepts/pipeline/" in PAGES and "" in PAGES and len(PAGES) >= 20


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page or "index")
def test_page_renders_and_draws_its_diagrams(site: docsite.DocSite, built_site: Path, page: str) -> None:
    diagrams = len(_DIAGRAM_SOURCE.findall((built_site / page / "index.html").read_text(encoding="utf-8")))

    rendered = site.render(page)

    assert 'class="md-content"' in rendered.dom and "<h1" in rendered.dom, f"{rendered.url} did not render"
    assert not rendered.console, f"{rendered.url} wrote to its console:\n" + "\n".join(rendered.console)
    assert not _DIAGRAM_SOURCE.search(rendered.dom), f"{rendered.url}: a diagram was not drawn"
    assert len(_DIAGRAM_DRAWN.findall(rendered.dom)) == diagrams, f"{rendered.url}: not every diagram was drawn"


def test_the_diagram_pages_have_diagrams(built_site: Path) -> None:
    for page in ("concepts/pipeline/", "concepts/segments-streams/", "concepts/retention/", "operations/security/",
                 "performance/"):
        assert _DIAGRAM_SOURCE.search((built_site / page / "index.html").read_text(encoding="utf-8")), page


@pytest.mark.parametrize("page", MAIN_PAGES, ids=lambda page: page or "index")
def test_main_page_screenshot(site: docsite.DocSite, screenshots: Path, page: str) -> None:
    png = screenshots / f"{(page.strip('/') or 'index').replace('/', '-')}.png"

    png.unlink(missing_ok=True)

    site.render(page, screenshot=png)

    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000)
    assert len(data) > 20_000, f"{png} is nearly empty ({len(data)} bytes)"
