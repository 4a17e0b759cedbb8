"""The docs name only what exists, and the architecture page draws the folders as they are.

Files move and names are renamed; a page that still cites the old ones misleads the reader
who trusts it most. So every file path, every dotted name of the three packages and every
link between pages that ``README.md`` and ``docs/*.md`` give is checked against the tree,
and the architecture page's diagram must hold every package folder, and no other.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PACKAGES = ("protocols", "runtime", "actors")

_PATH = re.compile(
    r"(?<![\w/.\-])((?:protocols|runtime|actors|tests|examples|docs|\.ci)/[\w./\-*<>]*[\w/*>])"
)
"""A path from the top of the repository (``runtime/_store/_sql.py``, ``actors/_session/``)."""
_NAME = re.compile(r"(?<![\w./\-])((?:protocols|runtime|actors)(?:\.[A-Za-z_]\w*)+)")
"""A dotted name of one of the packages (``runtime.testing.check_event_store``)."""
_LINK = re.compile(r"\]\(([\w.\-/]+\.(?:md|png))(?:#[\w\-]*)?\)")
"""A link to another page or picture of the docs, relative to the page."""
_TEST = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
"""A test by its pytest id (``tests/test_cli.py::test_check_passes_on_a_good_log``)."""
_PLACEHOLDER = re.compile(r"[<>*]|\.\.\.")


def _cited(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """``(page, token)`` for every match of ``pattern`` on every page."""
    return [
        (page.relative_to(ROOT).as_posix(), found)
        for page in PAGES
        for found in pattern.findall(page.read_text(encoding="utf-8"))
    ]


def _resolves(name: str) -> bool:
    """Whether ``name`` is a module, or a module's attribute (or an attribute's)."""
    parts = name.split(".")
    target: ModuleType | object | None = None
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        break
    else:
        return False
    for attribute in parts[cut:]:
        if not hasattr(target, attribute):
            return False
        target = getattr(target, attribute)
    return True


def test_every_path_the_docs_cite_exists() -> None:
    """``runtime/_sqlite/_writer.py`` in a page is a file (or folder) of the repository."""
    paths = [(page, p.rstrip(".")) for page, p in _cited(_PATH) if not _PLACEHOLDER.search(p)]
    assert len(paths) > 100  # the pattern still finds what the pages cite
    missing = [f"{page}: {path}" for page, path in paths if not (ROOT / path).exists()]
    assert missing == []


def test_every_dotted_name_the_docs_cite_imports() -> None:
    """``runtime.testing.check_event_store`` in a page imports, module then attributes."""
    names = sorted(set(_cited(_NAME)))
    assert len(names) > 50
    missing = [f"{page}: {name}" for page, name in names if not _resolves(name.rstrip("."))]
    assert missing == []


def test_every_test_the_docs_cite_is_defined() -> None:
    """A recipe's "copy this test" names a test function its file defines."""
    tests = [
        (page.relative_to(ROOT).as_posix(), found.group(1), found.group(2))
        for page in PAGES
        for found in _TEST.finditer(page.read_text(encoding="utf-8"))
    ]
    assert tests
    missing = [
        f"{page}: {path}::{name}"
        for page, path, name in tests
        if not re.search(
            rf"^(?:async )?def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M
        )
    ]
    assert missing == []


def test_every_link_between_pages_resolves() -> None:
    """``[stores.md](stores.md)`` and ``![...](console-fleet.png)`` name files beside the page."""
    links = [
        (page, target)
        for page in PAGES
        for target in _LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target
    ]
    assert links
    missing = [
        f"{page.relative_to(ROOT)}: {target}"
        for page, target in links
        if not (page.parent / target).exists()
    ]
    assert missing == []


def _package_folders() -> set[str]:
    return {
        f"{init.parent.relative_to(ROOT).as_posix()}/"
        for package in PACKAGES
        for init in (ROOT / package).rglob("__init__.py")
    }


def _diagram() -> str:
    """The first drawing of ``docs/architecture.md``: the folder tree."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    found = re.search(r"^```\n(.*?)^```", page, re.S | re.M)
    assert found is not None, "docs/architecture.md has no drawing"
    return found.group(1)


def test_the_architecture_diagram_draws_every_package_folder_and_only_those() -> None:
    """Each folder of ``protocols``, ``runtime`` and ``actors`` has its line in the drawing
    (what idea it holds, what it may import), so a new family cannot go unnamed."""
    drawn = set(re.findall(r"(?<![\w/])((?:protocols|runtime|actors)/(?:\w+/)*)", _diagram()))
    folders = _package_folders()
    assert sorted(folders - drawn) == [], "folders the drawing leaves out"
    assert sorted(drawn - folders) == [], "folders the drawing names that do not exist"


@pytest.mark.parametrize("folder", sorted(_package_folders()))
def test_a_folder_of_the_drawing_says_what_it_holds(folder: str) -> None:
    """A folder's line in the drawing carries words, not just its name."""
    lines = [line for line in _diagram().splitlines() if folder in line.split()]
    assert lines, f"{folder} has no line of its own in the drawing"
    words = " ".join(lines).replace(folder, " ")
    assert len(re.findall(r"[a-z]{3,}", words)) >= 3, lines


def _api_rows() -> list[tuple[str, str]]:
    """``(namespace, name)`` for each name ``docs/api.md``'s tables put in a namespace: a
    row of a namespace and what lives there, or of where a name moved (the last two cells)."""
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    placed: list[tuple[str, str]] = []
    for line in page.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) not in (2, 3) or not re.fullmatch(r"`[\w.]+`", cells[-2]):
            continue
        if any(cell.strip("`").split(".")[0] not in PACKAGES for cell in cells[:-1]):
            continue  # the table of error codes (tests/test_errors.py checks it)
        namespace = cells[-2].strip("`")
        placed += [(namespace, name) for name in re.findall(r"`([A-Za-z_]\w*)`", cells[-1])]
    return placed


def test_every_name_docs_api_places_in_a_namespace_is_there() -> None:
    """``actors.fleet``'s row naming ``FleetNode`` means ``actors.fleet.FleetNode`` imports."""
    rows = _api_rows()
    assert len(rows) > 150
    missing = [f"{ns}.{name}" for ns, name in rows if not _resolves(f"{ns}.{name}")]
    assert missing == []
