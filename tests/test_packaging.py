"""The installed packages are found by type checkers, from an app's own folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

APP = """\
import actors
import runtime
from protocols.transports import transport_from_env


async def main() -> str:
    async with runtime.open_runtime() as rt:
        session = await actors.spawn_session(rt, llm=transport_from_env())
        return session.id
"""


def test_an_app_outside_the_project_type_checks_against_the_install(tmp_path: Path) -> None:
    """``mypy --strict`` in a folder of its own finds ``actors``, ``runtime`` and
    ``protocols`` with their types (``py.typed``), through the install ``.ci/run`` makes
    (an editable install in ``compat`` mode, as the README says)."""
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "app.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert "Cannot find implementation" not in done.stdout, done.stdout
    assert done.returncode == 0, done.stdout
