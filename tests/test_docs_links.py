"""Every link into the docs reaches its file and its heading: relative links in docs/, README.md and CHANGELOG.md,
and `docs/<page>.md#<anchor>` written out in code, templates, pyproject or the docs' prose. An anchor is a heading's slug by GitHub's rule
(lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats) or an explicit `<a id="...">`."""

from __future__ import annotations

import os
import re
from collections import Counter
from functools import cache
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "CHANGELOG.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
CODE_SUFFIXES = {".py", ".j2", ".toml"}
SKIPPED_DIRS = {".venv", ".git", "data", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache"}
EXPLICIT_ID = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
NAMED_ANCHOR = re.compile(r"(?<![\w/.-])(docs/[A-Za-z0-9_.-]+\.md)#([A-Za-z0-9_-]+)")  # not inside a URL
MARKDOWN = MarkdownIt("commonmark").enable("table")


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, every character but letters, digits, `_`, `-` and spaces
    dropped, spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _heading_texts(tokens) -> list[str]:
    """The rendered text of each heading (code spans keep their content, emphasis and link markup go)."""
    texts = []
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type == "heading_open":
            texts.append("".join(child.content for child in inline.children
                                 if child.type in ("text", "code_inline")))
    return texts


@cache
def anchors(page: Path) -> frozenset[str]:
    text = page.read_text()
    seen: Counter[str] = Counter()
    slugs = set()
    for heading in _heading_texts(MARKDOWN.parse(text)):
        slug = github_slug(heading)
        slugs.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return frozenset(slugs | set(EXPLICIT_ID.findall(text)))


def link_targets(page: Path) -> list[str]:
    """Targets of the page's markdown links and images, outside code."""
    targets = []
    for token in MARKDOWN.parse(page.read_text()):
        for child in token.children or ():
            if child.type == "link_open":
                targets.append(child.attrs["href"])
            elif child.type == "image":
                targets.append(child.attrs["src"])
    return targets


def broken(source: Path, target: str, root: Path) -> str | None:
    """Why `target`, linked from `source`, does not resolve; None when it does. External links are not checked."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None
    path, _, anchor = target.partition("#")
    page = (source.parent / path).resolve() if path else source
    if not page.exists():
        return f"{source.relative_to(root)}: {target}: no file {path}"
    if anchor and page.suffix == ".md" and anchor not in anchors(page):
        return f"{source.relative_to(root)}: {target}: no heading or <a id> '{anchor}' in {page.relative_to(root)}"
    return None


def broken_links(root: Path, pages: list[str]) -> list[str]:
    problems = []
    for name in pages:
        source = root / name
        problems += [why for target in link_targets(source) if (why := broken(source, target, root))]
    return problems


def _sources(root: Path) -> list[Path]:
    """Code, templates, pyproject and markdown of the repository; not this module, whose examples are meant broken."""
    found = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        found += [Path(directory) / name for name in names if Path(name).suffix in CODE_SUFFIXES | {".md"}]
    return [path for path in found if path != Path(__file__).resolve()]


def broken_named_anchors(root: Path) -> list[str]:
    """`docs/<page>.md#<anchor>` written out in code, templates, pyproject and the docs' prose."""
    problems = []
    for source in _sources(root):
        for path, anchor in NAMED_ANCHOR.findall(source.read_text(errors="replace")):
            page = root / path
            if not page.exists():
                problems.append(f"{source.relative_to(root)}: {path}#{anchor}: no file {path}")
            elif anchor not in anchors(page.resolve()):
                problems.append(f"{source.relative_to(root)}: {path}#{anchor}: no heading or <a id> '{anchor}'")
    return problems


def test_the_slug_rule_is_githubs():
    assert github_slug("The lake on S3 and the Iceberg tables") == "the-lake-on-s3-and-the-iceberg-tables"
    assert github_slug("Probable matches: the same person under another email") == \
        "probable-matches-the-same-person-under-another-email"
    assert github_slug("deploy/dagster.yaml") == "deploydagsteryaml"
    assert github_slug("The Salesforce stand-in (crm/salesforce_standin/)") == \
        "the-salesforce-stand-in-crmsalesforce_standin"
    assert github_slug("Settings (COMMOPS_SERVICE_*, service/settings.py)") == \
        "settings-commops_service_-servicesettingspy"


def test_repeated_headings_explicit_ids_and_code_spans_give_the_anchors_github_gives(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('# Title\n\n## Run it\n\n## Run it\n\n<a id="old-name"></a>\n## `commops sync` options\n\n'
                    "```\n## not a heading\n```\n")
    assert anchors(page) == {"title", "run-it", "run-it-1", "old-name", "commops-sync-options"}


def test_a_broken_anchor_or_file_is_reported_and_a_good_link_is_not(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Where things are\n\n[ok](#where-things-are) "
                                            "[ok](b.md#b) [gone](b.md#renamed) [none](c.md) [web](https://x.org/y.md#z)\n")
    (tmp_path / "docs" / "b.md").write_text("# B\n\n`[code](nowhere.md)`; see docs/a.md#a and docs/c.md#c\n")
    (tmp_path / "tool.py").write_text('HELP = "see docs/b.md#b and docs/a.md#where-things-were"\n')

    assert broken_links(tmp_path, ["docs/a.md", "docs/b.md"]) == [
        "docs/a.md: b.md#renamed: no heading or <a id> 'renamed' in docs/b.md",
        "docs/a.md: c.md: no file c.md",
    ]
    assert sorted(broken_named_anchors(tmp_path)) == [
        "docs/b.md: docs/c.md#c: no file docs/c.md",
        "tool.py: docs/a.md#where-things-were: no heading or <a id> 'where-things-were'"]


def test_every_relative_link_in_the_docs_reaches_a_file_and_a_heading():
    assert broken_links(ROOT, PAGES) == []


def test_every_page_and_anchor_named_in_code_templates_or_prose_exists():
    assert broken_named_anchors(ROOT) == []
