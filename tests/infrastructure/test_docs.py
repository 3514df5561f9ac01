"""The README is the door: it opens with the two commands that work on a fresh clone, stays short,
and every link it (or tests/README.md) holds points at a file that exists. The reference in docs/ is
checked by `make docs` (mkdocs --strict), which `make test` runs; mkdocs never reads these two files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.infrastructure

README_MAX_LINES = 300
# [text](target) outside code spans; images and reference-style links are not used in these files.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _make_targets(project_root: Path) -> set[str]:
    text = (project_root / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, flags=re.MULTILINE))


def _local_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [
        t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")
    ]


def test_the_readme_opens_with_make_demo_and_make_test(project_root: Path) -> None:
    readme = (project_root / "README.md").read_text(encoding="utf-8")
    first_block = FENCE.search(readme)
    assert first_block is not None, "README.md has no code block"
    assert readme.index("```") < readme.index("\n## "), "the commands come before any section"
    commands = [line.split("#")[0].split() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == [["make", "demo"], ["make", "test"]]
    assert {"demo", "test"} <= _make_targets(project_root)


def test_the_readme_stays_short(project_root: Path) -> None:
    lines = (project_root / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference into docs/"


@pytest.mark.parametrize("name", ["README.md", "tests/README.md"])
def test_every_local_link_resolves(project_root: Path, name: str) -> None:
    path = project_root / name
    links = _local_links(path)
    assert links, f"{name} links nowhere"
    missing = [t for t in links if not (path.parent / t.split("#")[0]).exists()]
    assert missing == [], f"{name} links to files that do not exist: {missing}"


def test_make_test_builds_the_docs_strictly(project_root: Path) -> None:
    makefile = (project_root / "Makefile").read_text(encoding="utf-8")
    test_recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    docs_recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert test_recipe is not None and docs_recipe is not None
    assert re.search(r"\bdocs\b", test_recipe.group(1)), "make test does not run the docs build"
    assert "mkdocs build --strict" in docs_recipe.group(1)
    assert "--quiet" not in docs_recipe.group(1), "mkdocs 1.6 --quiet hides warnings from --strict"
