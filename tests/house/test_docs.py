"""The documentation a user finds their way in: a short README pointing into `docs/`, every link between the
pages resolving (files and headings), and a runbook section for every alert we ship."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.helpers import REPO

PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6} (.+)", line)):
            found.add(slug(m.group(1)))
    return found


def test_the_readme_is_short_and_keeps_its_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "./scripts/demo.sh" in text and "./scripts/test.sh" in text
    for page in ("docs/user-guide.md", "docs/operator-guide.md", "docs/architecture.md", "docs/internals.md"):
        assert f"]({page})" in text, f"the README does not point to {page}"
    assert (REPO / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_every_link_between_the_pages_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            if not where.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, broken


def test_every_alert_has_a_runbook_section_its_rule_points_to() -> None:
    rules = yaml.safe_load((REPO / "compose" / "prometheus" / "alerts.yml").read_text())
    guide = REPO / "docs" / "operator-guide.md"
    sections = anchors(guide)
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule["alert"]
            assert name.lower() in sections, f"no runbook section for {name} in {guide.name}"
            url = rule["annotations"]["runbook_url"]
            assert url.endswith(f"docs/operator-guide.md#{name.lower()}"), url
