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


def test_the_examples_type_check_without_ignores(tmp_path: Path) -> None:
    """The examples that read messages type-check under ``mypy --strict`` with no
    ``type: ignore`` (every message type has ``text``)."""
    examples = Path(__file__).parent.parent / "examples"
    chosen = ["02_agent_tree.py", "03_messages.py", "06_fleet.py"]
    for name in chosen:
        assert "type: ignore" not in (examples / name).read_text(encoding="utf-8"), name
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         *(str(examples / name) for name in chosen)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
