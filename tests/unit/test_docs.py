"""The manual: README.md is a short front page, docs/ is a site whose nav lists every page, and
every place the code cites the manual (`docs/<page>.md '<Heading>'`) names a page and a heading
that exist."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_README_LINES = 250
CODE_FOLDERS = ("runner", "labengine", "vllmfacts")

DOCS_CITATION = re.compile(r"(?<![\w./-])docs/([\w./-]+\.md)(?: '([^']+)')?")
# README.md 'Section', README.md, "Section", README: 'Section', README.md ("Section"),
# README.md, section 'Section'
README_CITATION = re.compile(
    r"README(?:\.md)?[,:]?\s+(?:section\s+)?\(?\s*['\"]([^'\"]+)['\"]", re.IGNORECASE
)
HEADING = re.compile(r"^(#{1,4})\s+(.+?)\s*#*\s*$")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _nav_pages(entries: Any) -> list[str]:
    """The page paths of a nav: plain strings, {title: page} and {title: [entries]}."""
    pages: list[str] = []
    if isinstance(entries, str):
        pages.append(entries)
    elif isinstance(entries, list):
        for entry in entries:
            pages.extend(_nav_pages(entry))
    elif isinstance(entries, dict):
        for value in entries.values():
            pages.extend(_nav_pages(value))
    return [p for p in pages if not re.match(r"^[a-z]+://", p)]


def _headings(markdown: str) -> list[str]:
    """The text of every `#`..`####` heading outside fenced code."""
    found: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            found.append(match.group(2))
    return found


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (its default slugify)."""
    text = re.sub(r"<[^>]+>", "", heading.replace("`", ""))
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _code_text(path: Path) -> str:
    """A source file with adjacent string literals joined and line breaks folded, so that a
    citation split over lines ("see README "\n "'Scenario format'") reads as one."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"(['\"])\s*\n\s*(?:f|rf|fr)?\1", "", text)
    return re.sub(r"\s*\n\s*", " ", text)


def _code_files() -> list[Path]:
    """The code, and the shipped files a user reads beside it (inventories, data notes)."""
    files: list[Path] = []
    for folder in CODE_FOLDERS:
        if (ROOT / folder).is_dir():
            files.extend(sorted((ROOT / folder).rglob("*.py")))
            files.extend(sorted((ROOT / folder).rglob("*.source.md")))
    files.extend(sorted((ROOT / "inventories").glob("*.yaml")))
    files.extend(sorted((ROOT / "scenarios").glob("*.yaml")))
    return files


def _mkdocs_config() -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def test_nav_lists_every_page_and_only_pages_that_exist() -> None:
    """Every page under docs/ is in mkdocs.yml's nav, and every nav entry is a page."""
    nav = _nav_pages(_mkdocs_config()["nav"])
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert sorted(on_disk - set(nav)) == [], "pages missing from nav"
    assert sorted(set(nav) - on_disk) == [], "nav entries with no page"
    assert len(nav) == len(set(nav)), "a page listed twice"


def test_mkdocs_config_is_strict_and_validates_links() -> None:
    """The build fails on a broken link, a missing anchor or a page left out of nav."""
    config = _mkdocs_config()
    assert config["strict"] is True
    validation = config["validation"]
    assert validation["nav"]["omitted_files"] == "warn"
    assert validation["links"]["not_found"] == "warn"
    assert validation["links"]["anchors"] == "warn"


def test_readme_is_a_short_front_page() -> None:
    """README.md stays under 250 lines: the manual is under docs/."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_README_LINES


def test_readme_links_to_docs_pages_that_exist() -> None:
    """Every docs/ link on the front page names a page, and its anchor a heading there."""
    broken: list[str] = []
    targets = [t for t in MD_LINK.findall(README.read_text(encoding="utf-8"))]
    docs_links = [t for t in targets if t.startswith("docs/")]
    assert docs_links, "the front page links to no docs page"
    for target in docs_links:
        path, _, anchor = target.partition("#")
        page = ROOT / path
        if not page.is_file():
            broken.append(f"{target}: no such page")
        elif anchor and anchor not in {_slug(h) for h in _headings(page.read_text("utf-8"))}:
            broken.append(f"{target}: no heading with that anchor")
    linked = {t.partition("#")[0] for t in docs_links}
    unlinked = [
        p.relative_to(ROOT).as_posix()
        for p in sorted(DOCS.rglob("*.md"))
        if p.relative_to(ROOT).as_posix() not in linked
    ]
    assert broken == []
    assert unlinked == [], "docs pages the front page's index does not link"


def test_every_citation_of_the_manual_in_the_code_exists() -> None:
    """`docs/<page>.md '<Heading>'` in the code names a page and one of its headings."""
    broken: list[str] = []
    headings: dict[Path, set[str]] = {}
    for source in _code_files():
        for match in DOCS_CITATION.finditer(_code_text(source)):
            page, heading = DOCS / match.group(1), match.group(2)
            where = f"{source.relative_to(ROOT)}: {match.group(0)}"
            if not page.is_file():
                broken.append(f"{where}: no such page")
                continue
            if page not in headings:
                headings[page] = set(_headings(page.read_text(encoding="utf-8")))
            if heading is not None and heading not in headings[page]:
                broken.append(f"{where}: no such heading on the page")
    assert broken == [], "\n".join(broken)


def test_no_code_cites_a_readme_section_that_moved() -> None:
    """A README section the code cites is on the front page; the rest are cited in docs/."""
    front_page = set(_headings(README.read_text(encoding="utf-8")))
    moved: list[str] = []
    for source in _code_files():
        for match in README_CITATION.finditer(_code_text(source)):
            if match.group(1) not in front_page:
                moved.append(f"{source.relative_to(ROOT)}: {match.group(0)}")
    assert moved == [], "\n".join(moved)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` passes: no broken link, anchor or page left out of nav. Built
    in-process through MkDocs' own build (unit tests start no process), with the same
    configuration and strictness as the command line."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(tmp_path))
    try:
        build(config)
    except Abort as exc:
        pytest.fail(f"mkdocs build --strict: {exc}")
    assert (tmp_path / "index.html").is_file()
