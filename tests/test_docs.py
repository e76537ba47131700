"""The documents hold together: README.md stays a front page that links every page under docs/, no
relative link and no path a page names points at a missing file, and docs/KEYS.md names exactly the keys
``worker.keys`` makes."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from worker.errors import BadId
from worker.keys import Keys

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 250
"""The front page stays short: what modelplan is, how to start, how it runs, where to read on."""

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def documents() -> list[Path]:
    return [README, ROOT / "BENCHMARKS.md", *sorted(DOCS.glob("*.md"))]


def links(path: Path) -> list[str]:
    """The targets of a document's markdown links, outside code blocks."""
    return LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


def relative(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; move detail into a page under docs/"


def test_the_readme_links_every_page_under_docs() -> None:
    linked = {(ROOT / t.split("#", 1)[0]).resolve() for t in links(README) if relative(t)}
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"README.md does not link docs/{', docs/'.join(unlinked)}"


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", path.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken(doc: Path) -> list[str]:
    """The relative links of ``doc`` whose file is missing, or whose ``#anchor`` its page lacks."""
    out = []
    for target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file) if file else doc
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            out.append(target)
    return out


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_heading(doc: Path) -> None:
    missing = broken(doc)
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files or headings: {missing}"


def test_the_link_check_sees_a_missing_file_or_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text('# Other\n\n## What "free" means: `x`\n')
    page.write_text(
        "# Top\n[here](gone.md) [there](https://example.org) [up](#top) [no](#nowhere)\n"
        "[ok](other.md#what-free-means-x) [bad](other.md#what-free) [dir](.)\n```\n[code](x.md)\n```\n"
    )
    assert broken(page) == ["gone.md", "#nowhere", "other.md#what-free"]


GENERATED = {"COVERAGE.md", "RELIABILITY.md"}
"""Pages a command writes (``tests.planner.coverage_table``, ``scripts/reliability``): what they name is
the generator's to keep."""
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:bench|dashboards|docs|examples|planner|producer|scripts|tests|worker)/[\w./-]*)"
)


@pytest.mark.parametrize(
    "doc", [d for d in documents() if d.name not in GENERATED], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_path_a_page_names_is_in_the_repository(doc: Path) -> None:
    """A file or folder of this repository named in a page (in prose, backticks or a command) exists:
    a page that names a moved file says where it went."""
    named = {m.rstrip(".") for m in REPO_PATH.findall(doc.read_text(encoding="utf-8"))}
    missing = sorted(p for p in named if "*" not in p and "{" not in p and not (ROOT / p).exists())
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


# What a key's parameters are called in the table, and a value ``Keys`` accepts for each: every id is
# checked, so a placeholder is a valid id that is swapped back for the table's name afterwards.
PREFIX = "PFX"
ARGUMENTS = {"state": ("queued", "{state}"), "repo_id": ("ORG/NAME", "{repo}")}


def key_names() -> set[str]:
    """Every key ``Keys`` makes, after the prefix, with its variable parts as ``{name}``: each property
    and method that returns a key (not a key prefix ending in ``:``, nor an ACL pattern)."""
    keys = Keys(PREFIX)
    names: set[str] = set()
    for name, member in inspect.getmembers(Keys):
        if name.startswith("_"):
            continue
        swaps: dict[str, str] = {PREFIX: "{prefix}"}
        if isinstance(member, property):
            value = getattr(keys, name)
        elif inspect.isfunction(member):
            args = []
            for param in list(inspect.signature(member).parameters)[1:]:
                given, shown = ARGUMENTS.get(param, (f"P{param.replace('_', '-')}Q", "{" + param + "}"))
                args.append(given)
                swaps[given] = shown
            try:
                value = getattr(keys, name)(*args)
            except BadId as e:
                raise AssertionError(f"Keys.{name} refuses {args}: give its parameters a value in ARGUMENTS") from e
        else:
            continue
        if not isinstance(value, str) or not value.startswith(PREFIX + ":"):
            continue
        if value.endswith(":") or "*" in value:
            continue
        key = value.removeprefix(PREFIX + ":")
        for given, shown in swaps.items():
            key = key.replace(given, shown)
        names.add(key)
    return names


def table_keys() -> set[str]:
    """The first column of docs/KEYS.md's table."""
    text = (DOCS / "KEYS.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([^`]+)` \|", text, re.M)
    assert rows, "docs/KEYS.md has no key table"
    return set(rows)


def test_the_key_table_names_exactly_the_keys_the_code_makes() -> None:
    code, table = key_names(), table_keys()
    assert not code - table, f"docs/KEYS.md lacks keys worker.keys makes: {sorted(code - table)}"
    assert not table - code, f"docs/KEYS.md names keys worker.keys does not make: {sorted(table - code)}"


def test_the_code_side_of_the_key_check_sees_every_kind_of_key() -> None:
    """Fixed keys, keys with an id, keys with two parts, RQ's keys named after the prefix; prefixes and ACL
    patterns left out."""
    names = key_names()
    assert {"nodes", "node:{node_id}", "hub:{repo}@{revision}", "jobs:{state}", "rq:queue:{prefix}"} <= names
    assert not any(n.endswith(":") or "*" in n for n in names)
