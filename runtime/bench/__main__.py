"""``python -m runtime.bench SUITE [--json]``: run one kernel benchmark suite."""

from __future__ import annotations

from runtime.bench import SUITES, main

if __name__ == "__main__":
    raise SystemExit(main(None, suites=SUITES, prog="python -m runtime.bench"))
