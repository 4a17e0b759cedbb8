"""The ``powertrio`` command line."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``powertrio`` console script."""
    args = sys.argv[1:] if argv is None else argv
    print("powertrio: an actor runtime for LLM agents on Trio")
    print("usage: powertrio bench [actors|log] [--json]")
    return 0 if not args or args[0] in {"-h", "--help"} else 2
