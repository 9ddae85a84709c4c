"""The documentation's pictures: every image a page shows is a screenshot the test suite takes
(:data:`tests.screenshots.IMAGES`), kept in ``docs/images``, and every screenshot taken for the
documentation is shown on some page, so that no picture on the site is drawn by hand or left stale."""

from __future__ import annotations

import re
from pathlib import Path

from .screenshots import IMAGES

DOCS = Path(__file__).resolve().parent.parent / "docs"
IMAGES_DIR = DOCS / "images"
# Markdown's ![text](target "title") and HTML's <img src="target">; code blocks are not told apart
# (a page quoting the syntax in code would count as showing that image)
SHOWN = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img\b[^>]*\bsrc=[\"']([^\"']+)[\"']")


def shown_images() -> dict[Path, list[str]]:
    """Each image a page shows, resolved from the page's folder, and the pages showing it."""
    shown: dict[Path, list[str]] = {}
    for page in sorted(DOCS.rglob("*.md")):
        for markdown, html in SHOWN.findall(page.read_text()):
            target = (page.parent / (markdown or html)).resolve()
            shown.setdefault(target, []).append(str(page.relative_to(DOCS)))
    return shown


def test_every_image_shown_is_a_screenshot_the_tests_take():
    wrong = {str(target): pages for target, pages in shown_images().items()
             if target.parent != IMAGES_DIR or target.name not in IMAGES or not target.is_file()}
    assert wrong == {}


def test_every_image_kept_is_a_declared_screenshot():
    assert sorted(p.name for p in IMAGES_DIR.iterdir()) == sorted(IMAGES)


def test_every_screenshot_is_shown_on_a_page():
    shown = {target.name for target in shown_images() if target.parent == IMAGES_DIR}
    assert sorted(set(IMAGES) - shown) == []
