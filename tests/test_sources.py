"""Rules the project's own files keep, whoever edits them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_ISSUE = re.compile(r"\bissues? #?\d+|\bissue #\d+", re.IGNORECASE)


def _tracked(*suffixes: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if name.endswith(suffixes)]


def test_no_file_cites_an_issue_number() -> None:
    """Code and docs explain themselves: a reader has no tracker to look an issue up in."""
    citing = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _tracked(".py", ".md", ".toml", ".html", ".js", ".css", ".cfg")
        if path.exists()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _ISSUE.search(line)
    ]
    assert citing == []
