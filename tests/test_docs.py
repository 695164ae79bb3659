"""The documentation: the site builds in strict mode, README.md stays a short tour whose
links resolve, and search_spaces/README.md lists every shipped space.

Why build the site in a test: ``mkdocs build --strict`` fails on a broken link or anchor
between pages, a page missing from the nav, or a docstring mkdocstrings cannot render, so
moving or renaming a page (or a module in the API reference) fails here, not on a reader.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)
EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|//|#)", re.I)


def relative_links(markdown: str) -> list[str]:
    """Link and image targets that point into the checkout (no URLs, no bare anchors)."""
    text = FENCE.sub("", markdown)
    targets = INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text)
    return [t for t in targets if not EXTERNAL.match(t)]


def test_site_builds_in_strict_mode_without_warnings(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "WARNING" not in output, output
    assert (site / "index.html").is_file()
    assert (site / "api" / "index.html").is_file()


def test_readme_is_a_short_tour() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; at most {README_MAX_LINES}: move detail into docs/"
    )


def test_every_shipped_space_is_listed_in_its_readme() -> None:
    listing = (ROOT / "search_spaces" / "README.md").read_text(encoding="utf-8")
    spaces = sorted(p.name for p in (ROOT / "search_spaces").glob("*.yaml"))
    assert spaces, "no search_spaces/*.yaml found"
    # the whole file name, not a tail of a longer one (gap.yaml inside protocol_gap.yaml)
    missing = [n for n in spaces if not re.search(rf"(?<![\w.-]){re.escape(n)}", listing)]
    assert not missing, f"search_spaces/README.md does not name {missing}"


@pytest.mark.parametrize(
    "readme", [README, ROOT / "search_spaces" / "README.md"], ids=["README", "search_spaces"]
)
def test_every_relative_link_in_the_readme_exists(readme: Path) -> None:
    links = relative_links(readme.read_text(encoding="utf-8"))
    assert links, f"{readme.name} links to no file: the docs pages should be linked"
    broken = [link for link in links if not (readme.parent / link.split("#", 1)[0]).exists()]
    assert not broken, f"{readme} links to files that do not exist: {broken}"


def test_link_finder_sees_links_and_skips_urls_anchors_and_code() -> None:
    text = (
        "[a](docs/a.md) ![img](docs/x.png) [b](docs/b.md#part) [c](https://e.org/x.md)\n"
        "[d](#local) [m](mailto:a@b.org)\n\n[e]: docs/e.md\n"
        "```bash\n[f](docs/in_code.md)\n```\n"
    )
    assert relative_links(text) == ["docs/a.md", "docs/x.png", "docs/b.md#part", "docs/e.md"]


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "getting-started.md"])
def test_the_walkthrough_space_is_the_one_its_benchmark_runs(page: Path) -> None:
    """The outputs the walk-through shows come from ``benchmarks.walkthrough``; the space it
    tells a reader to save must be the one that benchmark ran."""
    from benchmarks.walkthrough import SPACE

    assert f"```yaml\n{SPACE}```" in page.read_text()
