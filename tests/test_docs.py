"""The README is for users: short, the two commands first, and every link it or docs/ makes leads
somewhere. Details live in docs/, measurements in bench/HISTORY.md."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def _documents() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def test_the_readme_is_short_and_starts_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.split("\n")) <= 250, "README.md is for users: move details into docs/"
    first_block = text.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.strip().split("\n")]
    assert commands == ["make run", "make test"]


def test_every_relative_link_leads_to_a_file_and_heading_that_exist():
    for document in _documents():
        text = document.read_text(encoding="utf-8")
        for target, anchor in _LINK.findall(text):
            if "://" in target:
                continue
            path = (document.parent / target).resolve()
            assert path.exists(), f"{document.relative_to(REPO)}: link to {target} leads nowhere"
            if anchor and path.suffix == ".md":
                headings = {
                    re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                    for line in path.read_text(encoding="utf-8").split("\n")
                    if line.startswith("#")
                }
                assert anchor[1:] in headings, f"{document.relative_to(REPO)}: {target}{anchor} names no heading"
