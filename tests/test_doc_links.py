"""Every relative link in the project's Markdown (README, docs, benchmark and result pages)
points to a file or folder that is in the repository."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md"]
    + [p for folder in ("docs", "benchmarks", "results") for p in (ROOT / folder).rglob("*.md")]
)
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def relative_links(text: str) -> list[str]:
    """The link targets of `text` that are paths, not web or mail addresses."""
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_relative_links_are_found_and_web_links_skipped():
    text = "[a](../x.md) [b](https://e.org/y) [c](z/#part) [d](mailto:q@e.org) [e](#here)"
    assert relative_links(text) == ["../x.md", "z/"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    missing = [t for t in relative_links(page.read_text()) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing paths: {missing}"
