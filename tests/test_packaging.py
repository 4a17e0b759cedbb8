"""The installed packages are found by type checkers, from an app's own folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

APP = """\
import actors
import runtime
from protocols.transports import transport_from_env


async def main() -> str:
    async with runtime.open_runtime() as rt:
        session = await actors.spawn_session(rt, llm=transport_from_env())
        return session.id
"""


EXAMPLES = Path(__file__).parent.parent / "examples"
TYPED_EXAMPLES = ["02_agent_tree.py", "03_messages.py", "06_fleet.py"]
"""The examples that read messages: they type-check with no ``type: ignore``."""


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One ``mypy --strict`` run, in a folder of its own, over an app and the examples: the
    packages' types are read once for both tests."""
    folder = tmp_path_factory.mktemp("app")
    (folder / "app.py").write_text(APP, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "app.py",
         *(str(EXAMPLES / name) for name in TYPED_EXAMPLES)],
        cwd=folder, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


# One worker runs both, so the module's one mypy run serves them (seconds: run first).
pytestmark = [pytest.mark.xdist_group("mypy"), pytest.mark.slow]


def test_an_app_outside_the_project_type_checks_against_the_install(
    checked: subprocess.CompletedProcess[str],
) -> None:
    """``mypy --strict`` in a folder of its own finds ``actors``, ``runtime`` and
    ``protocols`` with their types (``py.typed``), through the install ``.ci/run`` makes
    (an editable install in ``compat`` mode, as the README says)."""
    assert "Cannot find implementation" not in checked.stdout, checked.stdout
    assert [line for line in checked.stdout.splitlines() if line.startswith("app.py")] == []
    assert checked.returncode == 0, checked.stdout


def test_the_examples_type_check_without_ignores(
    checked: subprocess.CompletedProcess[str],
) -> None:
    """The examples that read messages type-check under ``mypy --strict`` with no
    ``type: ignore`` (every message type has ``text``)."""
    for name in TYPED_EXAMPLES:
        assert "type: ignore" not in (EXAMPLES / name).read_text(encoding="utf-8"), name
    assert checked.returncode == 0, checked.stdout
