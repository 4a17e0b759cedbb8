"""The README's code runs as written on a machine with no provider configured.

Its Python blocks run as scripts and its command block runs line by line in one folder (a
line that names a placeholder such as ``ID`` stands for many commands and is skipped, as
are the set-up commands, which ``.ci/run`` itself is). With no provider a command either
falls back to an offline model or fails with one typed line that says what to set. Both
run in this process, as ``__main__`` and through the CLI's ``main``: no interpreter start-up
per block or command.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shlex
from pathlib import Path

import pytest
from _cli import environ, run_cli

README = Path(__file__).parent.parent / "README.md"
PLACEHOLDER = re.compile(r"\b(ID|REQUEST|NEW|SUITE|FILE)\b")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _offline_environment() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("POWERTRIO_", "OPENAI_", "ANTHROPIC_"))
    }
    env["POWERTRIO_DEMO_DELAY"] = "0"
    return env


def _commands() -> list[str]:
    """The ``powertrio`` commands of the README's command block, one per entry."""
    [block] = [b for b in _blocks("bash") if "powertrio sessions" in b]
    found: list[str] = []
    for line in block.splitlines():
        code = line.split("#", 1)[0]
        for piece in code.split(";"):
            command = piece.strip()
            if command and not PLACEHOLDER.search(command):
                found.append(command)
    return found


@pytest.mark.parametrize("number", range(len(_blocks("python"))))
def test_python_blocks_run_offline(number: int, tmp_path: Path) -> None:
    """Each Python block of the README runs as a script and exits 0 with no provider."""
    script = tmp_path / "block.py"
    script.write_text(_blocks("python")[number], encoding="utf-8")
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        environ(_offline_environment()),
        contextlib.chdir(tmp_path),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        runpy.run_path(str(script), run_name="__main__")
    assert "Traceback" not in stderr.getvalue()


def test_the_command_block_runs_line_by_line(tmp_path: Path) -> None:
    """Every command of the block without a placeholder runs in one folder, in order:
    it succeeds, or (a model run with no provider) says in one typed line what to set."""
    commands = _commands()
    assert any(c.startswith("powertrio run") for c in commands), commands
    for command in commands:
        if command.startswith("powertrio bench"):
            continue  # every benchmark suite: minutes of work, run by test_cli's bench test
        if command.startswith("powertrio run --offline"):
            continue  # the local model's run: test_cli drives the same server, much faster
        done = run_cli(*shlex.split(command)[1:], cwd=tmp_path, env=_offline_environment())
        if done.returncode != 0:
            first = done.stderr.strip().splitlines()[0]
            assert first.startswith("error [config.missing]: "), (command, done.stderr)
            assert "Traceback" not in done.stderr
