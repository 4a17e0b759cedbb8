"""The tests' handle on llama.cpp's server with SmolLM2-135M.

The server itself is the one ``powertrio run --offline`` uses (``actors.cli._local_llm``): a
child process on a free loopback port, so a crash there cannot take the tests down.
"""

from __future__ import annotations

from typing import final

import attrs


@final
@attrs.frozen
class LlamaServer:
    """A running server; ``url`` is its root (``/v1/...`` lies below it)."""

    url: str
