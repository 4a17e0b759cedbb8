"""Start-up: what a fresh process loads for ``import actors``, a few names, and ``--help``.

What gets imported is deterministic, unlike how long it takes (the ``startup`` bench's
figures): each test runs a new interpreter, because this test session has long loaded
everything, and compares the modules it loaded with those the path must not need.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HEAVY = (
    "httpx",
    "jsonschema_rs",
    "mcp",
    "opentelemetry",
    "psycopg",
    "pydantic",
    "pytest",
    "rich",
    "starlette",
    "trio_asyncio",
    "xllamacpp",
)
"""Libraries only some paths need: a tool server, a provider, the console, telemetry, tests."""


def loaded_after(code: str, cwd: Path | None = None) -> list[str]:
    """The sorted names of every module loaded by a fresh interpreter running ``code``."""
    probe = f"{code}\nimport sys\nprint('-- modules --', *sorted(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "POWERTRIO_DEMO_DELAY": "0"},
    )
    return done.stdout.rpartition("-- modules --")[2].split()


def powertrio(*args: str) -> str:
    """Code that runs ``powertrio ARGS`` as the console script does, its output dropped."""
    return (
        "import contextlib, io, sys\n"
        "from actors.cli import main\n"
        "sys.argv[0] = 'powertrio'\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main({list(args)!r}) == 0"
    )


def _heavy(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def _ours(modules: list[str]) -> list[str]:
    """Our modules beyond the error tree and the helpers every package's ``__init__`` uses."""
    always = ("protocols", "protocols.errors", "protocols.lowlevel", "protocols._util")
    return [
        m
        for m in modules
        if m.split(".")[0] in ("protocols", "runtime", "actors")
        and m not in always
        and not m.startswith("protocols._errors_")
    ]


def test_import_actors_loads_none_of_its_modules_and_no_optional_library() -> None:
    """``import actors`` binds its names lazily: no agent module, no runtime, no codec, and
    none of the libraries only some programs need (pytest came with ``trio.testing``)."""
    loaded = loaded_after("import actors")
    expected_ours = ["actors"]
    assert expected_ours == _ours(loaded)
    nothing: list[str] = []
    assert nothing == _heavy(loaded)


def test_the_agent_api_loads_no_provider_console_or_test_library() -> None:
    """A program that runs agents loads the session and the runtime, not httpx, rich, the
    console, PostgreSQL's driver, telemetry or pytest."""
    loaded = loaded_after("from actors import AgentSpec, spawn_agent, tool")
    assert "actors._session._actor" in loaded
    assert "runtime._runtime" in loaded
    only_the_schema_validator = ["jsonschema_rs"]
    assert only_the_schema_validator == _heavy(loaded)


def test_a_runtime_with_its_store_loads_no_other_engine_and_no_cluster(tmp_path: Path) -> None:
    """Opening a runtime on SQLite loads the kernel and that engine: no PostgreSQL
    module, no node, no lease SQL (the kernel knows a fleet only as a membership)."""
    loaded = loaded_after(
        "import trio\n"
        "from runtime import open_runtime, open_sqlite_store\n"
        "async def main():\n"
        "    async with open_sqlite_store('log.sqlite') as store, open_runtime(store=store):\n"
        "        pass\n"
        "trio.run(main)",
        cwd=tmp_path,
    )
    assert "runtime._sqlite._store" in loaded
    elsewhere = [m for m in loaded if m.startswith(("runtime._postgres", "runtime._cluster"))]
    nothing: list[str] = []
    assert nothing == elsewhere


def test_help_loads_no_agent_no_runtime_and_no_optional_library() -> None:
    """``powertrio --help`` builds the parser and prints it: none of the commands' modules,
    no session, no runtime, no store."""
    loaded = loaded_after(powertrio("--help"))
    expected_ours = [
        "actors",
        "actors.cli",
        "actors.cli._argtypes",
        "actors.cli._fleet_args",
        "actors.cli._logs",
        "actors.cli._main",
        "actors.cli._serve_ui",
    ]
    assert expected_ours == _ours(loaded)
    nothing: list[str] = []
    assert nothing == _heavy(loaded)


def test_the_demo_run_loads_no_provider_transport_and_no_test_library(tmp_path: Path) -> None:
    """``powertrio run --demo`` runs an offline scripted model: httpx (and the CLI it
    imports), the transports and pytest stay unloaded."""
    loaded = loaded_after(powertrio("run", "--demo", "Compare two ideas."), cwd=tmp_path)
    assert "actors._session._actor" in loaded
    # An MCP server's environment is kept as a transports' Secret: that module alone.
    transports = [m for m in loaded if m.startswith("protocols.transports")]
    only_the_secret = ["protocols.transports", "protocols.transports._secret"]
    assert only_the_secret == transports
    # The tools' schemas are validated; the output may or may not be rich's.
    nothing: list[str] = []
    assert nothing == [m for m in _heavy(loaded) if m not in ("jsonschema_rs", "rich")]


def test_a_class_reached_through_another_name_reports_the_package() -> None:
    """Loading ``spawn_session`` loads the ``Session`` class too; it reports ``actors`` as
    its module, as it did when the package loaded every name at import."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "from actors import spawn_session\n"
            "from actors._session._handle import Session\n"
            "from actors._session._events import SessionState\n"
            "print(Session.__module__, SessionState.__module__)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    expected = "actors actors"
    assert expected == loaded.stdout.strip()


def test_a_lazy_package_lists_its_names_and_refuses_unknown_ones() -> None:
    """``dir()`` lists every name before it is loaded (completion, ``help()``), and a name
    the package does not export is the usual ``AttributeError``, so ``from actors import
    testing`` still finds the subpackage."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, actors\n"
            "print('spawn_agent' in dir(actors), 'actors._session._spawn' in sys.modules)\n"
            "try:\n"
            "    actors.no_such_name\n"
            "except AttributeError as exc:\n"
            "    print(exc)\n"
            "from actors import testing\n"
            "print(testing.__name__)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    expected = ["True False", "module 'actors' has no attribute 'no_such_name'", "actors.testing"]
    assert expected == loaded.stdout.splitlines()
