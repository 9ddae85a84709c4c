"""The documentation stays readable: short paragraphs, a heading every few of them.

How it counts. Each page under ``docs/`` is rendered with Python-Markdown and the extensions the
site uses (``mkdocs.yml``), HTML comments (the generated pages' markers) removed first. A *prose
paragraph* is a ``<p>`` that is not inside a list item, a table, a block quote or a code block;
its words are its text split on white space (inline code counts as words, an image alone is not a
paragraph). *Words per heading* is every word of prose (paragraphs, list items and quotes; not
code, not tables) over all pages, divided by the number of headings (``<h1>`` … ``<h6>``). The limits are
those of a site that reads well: encode/starlette's ``docs/`` measured the same way gives a median
of 14 words, a 90th percentile of 34 and 44 words per heading.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import markdown
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXTENSIONS = ["tables", "admonition", "pymdownx.superfences", "toc"]
MEDIAN_WORDS = 30
P90_WORDS = 60
LONGEST_WORDS = 120
WORDS_PER_HEADING = 150
NOT_PROSE = {"li", "table", "blockquote", "pre"}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}


@dataclass
class Prose(HTMLParser):
    """One page's paragraphs (their word counts), its words of prose and its headings."""

    paragraphs: list[int] = field(default_factory=list)
    words: int = 0
    headings: int = 0
    open_tags: list[str] = field(default_factory=list)
    paragraph: list[str] | None = None

    def __post_init__(self) -> None:
        super().__init__()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.headings += tag in HEADINGS
        if tag == "p" and not NOT_PROSE & set(self.open_tags):
            self.paragraph = []
        self.open_tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        while self.open_tags and self.open_tags.pop() != tag:
            pass
        if tag == "p" and self.paragraph is not None:
            if words := len(" ".join(self.paragraph).split()):
                self.paragraphs.append(words)
            self.paragraph = None

    def handle_data(self, data: str) -> None:
        if self.paragraph is not None:
            self.paragraph.append(data)
        inside = set(self.open_tags)
        if inside & {"p", "li"} and not inside & {"pre", "table"}:
            self.words += len(data.split())


def prose_of(text: str) -> Prose:
    html = markdown.markdown(re.sub(r"<!--.*?-->", "", text, flags=re.S), extensions=EXTENSIONS)
    prose = Prose()
    prose.feed(html)
    return prose


def figures(pages: list[Path]) -> dict[str, float]:
    read = [prose_of(page.read_text()) for page in pages]
    paragraphs = [n for prose in read for n in prose.paragraphs]
    return {"paragraphs": len(paragraphs), "median": statistics.median(paragraphs),
            "p90": statistics.quantiles(paragraphs, n=10, method="inclusive")[-1], "longest": max(paragraphs),
            "words per heading": sum(p.words for p in read) / sum(p.headings for p in read)}


def test_paragraphs_and_headings_are_counted_as_the_docstring_says():
    text = ("# Title\n\nOne two three.\n\n- a list item of six words\n\n| a | b |\n| - | - |\n| c d | e |\n\n"
            "```\nx = 1\n```\n\n    indented code\n\n![an image](i.png)\n\n> quoted words\n\n"
            "## Next\n\nFour `words in` code.\n\n<!-- generated: x -->\n")
    prose = prose_of(text)
    assert prose.paragraphs == [3, 4]
    assert prose.words == 3 + 6 + 2 + 4  # the paragraphs, the list item and the quote
    assert prose.headings == 2


def test_the_docs_read_in_short_paragraphs_under_frequent_headings():
    seen = figures(sorted((ROOT / "docs").rglob("*.md")))
    assert seen["median"] <= MEDIAN_WORDS, seen
    assert seen["p90"] <= P90_WORDS, seen
    assert seen["longest"] <= LONGEST_WORDS, seen
    assert seen["words per heading"] <= WORDS_PER_HEADING, seen


@pytest.mark.parametrize("words", [MEDIAN_WORDS * 3])
def test_a_wall_of_text_fails_the_limits(tmp_path, words):
    page = tmp_path / "wall.md"
    page.write_text("# A page\n\n" + "\n\n".join(" ".join(["word"] * words) for _ in range(5)) + "\n")
    seen = figures([page])
    assert seen["median"] > MEDIAN_WORDS and seen["p90"] > P90_WORDS and seen["words per heading"] > WORDS_PER_HEADING
