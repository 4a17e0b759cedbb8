"""What a person sees when something goes wrong: one typed line, tracebacks on request.

The behaviour runs in this process (``tests/_cli.py``). Python's last-resort logging
handler only speaks when no handler is configured anywhere, so the tests that check what
reaches a plain terminal take pytest's own capture handlers off the root logger first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import environment, run_cli
from _scripted_http import ScriptedHTTPServer, json_reply

_FRESH_ID = re.compile(r"\b([a-z]+)_[0-9A-Z]{26}\b")

PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"


@contextlib.contextmanager
def bare_logging() -> Iterator[None]:
    """Logging as a plain process has it: no handler on the root logger (pytest adds its
    own for each phase of a test, so this is entered in the test's body)."""
    root = logging.getLogger()
    saved = root.handlers
    root.handlers = []
    try:
        yield
    finally:
        root.handlers = saved


def _provider_env(url: str) -> dict[str, str]:
    return environment(
        POWERTRIO_BASE_URL=url + "/v1", POWERTRIO_API_KEY="sk-test", POWERTRIO_MODEL="m"
    )


def _refused() -> ScriptedHTTPServer:
    """A provider that refuses the key (401: not retried)."""
    return ScriptedHTTPServer([json_reply(401, {"error": {"message": "bad key"}})])


def test_a_provider_error_is_one_typed_line_and_no_traceback(
    tmp_path: Path,
) -> None:
    """A failed model call prints the run's summary with the error's code, and nothing of
    the library's logging: no traceback, no exception group."""
    with _refused() as server, bare_logging():
        done = run_cli("run", "plan a picnic", cwd=tmp_path, env=_provider_env(server.url))
    assert done.returncode == 1
    stderr = _FRESH_ID.sub(r"\1_<id>", done.stderr)
    assert "Traceback" not in stderr and "ExceptionGroup" not in stderr
    assert stderr == "session ses_<id> · model m (openai) · log powertrio.sqlite\n"
    typed = (
        "llm.auth: openai: HTTP 401: bad key (check the API key: POWERTRIO_API_KEY or the "
        "provider's own variable)"
    )
    assert [line for line in done.stdout.splitlines() if "llm." in line] == [typed]


def test_debug_shows_the_log_and_the_typed_traceback(tmp_path: Path) -> None:
    """``--debug`` (and its alias ``--verbose``) shows the library's log on stderr: the
    failed model call with the traceback of the provider's typed error, not of a group."""
    for flag in ("--debug", "--verbose"):
        with _refused() as server, bare_logging():
            done = run_cli(
                "run", "plan a picnic", flag, cwd=tmp_path, env=_provider_env(server.url)
            )
        assert done.returncode == 1
        stderr = _FRESH_ID.sub(r"\1_<id>", done.stderr)
        assert "ExceptionGroup" not in stderr
        lines = stderr.splitlines()
        assert lines[:3] == [
            "session ses_<id> · model m (openai) · log powertrio.sqlite",
            "powertrio.transports: openai: attempt 1 failed (llm.auth: openai: HTTP 401: bad "
            "key (check the API key: POWERTRIO_API_KEY or the provider's own variable)); "
            "giving up",
            "powertrio.session: session ses_<id>: the model call of run run_<id> raised "
            "LLMAuthError",
        ]
        assert lines[3] == "Traceback (most recent call last):"
        assert lines[-1] == (
            "protocols.errors.LLMAuthError: openai: HTTP 401: bad key (check the API key: "
            "POWERTRIO_API_KEY or the provider's own variable)"
        )


def test_log_file_keeps_the_log_and_the_terminal_stays_quiet(tmp_path: Path) -> None:
    """``--log-file PATH`` appends the records with their tracebacks to PATH; stderr shows
    what it shows without it."""
    log = tmp_path / "powertrio.log"
    with _refused() as server, bare_logging():
        done = run_cli(
            "run",
            "plan a picnic",
            "--log-file",
            str(log),
            cwd=tmp_path,
            env=_provider_env(server.url),
        )
    assert done.returncode == 1
    assert _FRESH_ID.sub(r"\1_<id>", done.stderr) == (
        "session ses_<id> · model m (openai) · log powertrio.sqlite\n"
    )
    text = log.read_text(encoding="utf-8")
    assert " ERROR powertrio.session: session ses_" in text
    assert "raised LLMAuthError\nTraceback (most recent call last):\n" in text
    assert "ExceptionGroup" not in text
    # The command took its handlers away: the library's logger has its own alone again.
    assert [type(h) for h in logging.getLogger("powertrio").handlers] == [logging.NullHandler]


def test_log_file_records_the_error_a_command_ends_with(tmp_path: Path) -> None:
    """A command that fails with an error writes it with its traceback to the log file,
    and prints the one typed line."""
    log = tmp_path / "powertrio.log"
    with bare_logging():
        done = run_cli("show", "nope", "--log-file", str(log), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        "error [store.not_found]: no event log at 'powertrio.sqlite': start one with "
        '`powertrio run "task"` here, or point at one with --db PATH\n'
    )
    text = log.read_text(encoding="utf-8")
    assert " ERROR powertrio.cli: powertrio show failed: no event log at" in text
    assert "Traceback (most recent call last):\n" in text


def test_a_log_file_that_cannot_be_written_is_a_typed_error(tmp_path: Path) -> None:
    """``--log-file`` in a folder that does not exist: the write error, typed."""
    where = tmp_path / "missing" / "powertrio.log"
    done = run_cli("sessions", "--log-file", str(where), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        f"error [io.write_failed]: could not write {str(where)!r}: No such file or directory\n"
    )


# -- optional extras ---------------------------------------------------------------------------


def _without(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """Importing ``packages`` (and their submodules) fails, as where they are not installed."""
    for name in list(sys.modules):
        if name.partition(".")[0] in packages:
            monkeypatch.setitem(sys.modules, name, None)
    for package in packages:
        monkeypatch.setitem(sys.modules, package, None)


def test_the_command_s_own_needs_are_core_dependencies() -> None:
    """``pip install .`` (the README's install) brings what ``powertrio`` prints with, and
    every extra the CLI names for a missing module is one ``pyproject.toml`` defines."""
    from actors.cli._main import _EXTRAS

    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    core = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]}
    assert "rich" in core
    assert set(_EXTRAS.values()) <= set(project["optional-dependencies"])


def test_a_missing_module_of_an_extra_is_a_typed_error_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without rich (a broken install) a command says what to install, with a code."""
    _without(monkeypatch, "rich")
    done = run_cli("sessions", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error [config.missing_extra]: powertrio sessions needs the 'cli' extra (rich is not "
        "installed): pip install 'powertrio[cli]'\n"
    )
    as_json = run_cli("sessions", "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout) == {
        "error": {
            "code": "config.missing_extra",
            "message": "powertrio sessions needs the 'cli' extra (rich is not installed): "
            "pip install 'powertrio[cli]'",
        }
    }


def test_ui_without_the_console_extra_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``powertrio ui`` where Starlette is not installed: the ``console`` extra, typed."""
    _without(monkeypatch, "starlette")
    for name in [n for n in sys.modules if n.startswith("actors.console")]:
        monkeypatch.delitem(sys.modules, name)  # imported again, and fails, as at first
    done = run_cli("ui", "--demo", "--port", "0", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error [config.missing_extra]: powertrio ui needs the 'console' extra (starlette is "
        "not installed): pip install 'powertrio[console]'\n"
    )


@pytest.mark.parametrize(
    ("args", "option", "problem"),
    [
        (("ui", "--demo", "--port", "x"), "--port", "must be a port number, got 'x'"),
        (("ui", "--demo", "--port", "70000"), "--port", "must be between 0 and 65535, got 70000"),
        (("serve", "--ui-port", "-1"), "--ui-port", "must be between 0 and 65535, got -1"),
    ],
)
def test_a_bad_port_is_a_usage_error_that_says_what_is_wrong(
    tmp_path: Path, args: tuple[str, ...], option: str, problem: str
) -> None:
    """``ui --port`` and ``serve --ui-port`` check a port the same way (one argument type)."""
    done = run_cli(*args, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.endswith(f"error: argument {option}: {problem}\n")
