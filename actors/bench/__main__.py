"""``python -m actors.bench SUITE [--json] [--quick]``: run one benchmark suite."""

from __future__ import annotations

from actors.bench import SUITES
from runtime.bench import main

if __name__ == "__main__":
    raise SystemExit(main(None, suites=SUITES, prog="python -m actors.bench"))
