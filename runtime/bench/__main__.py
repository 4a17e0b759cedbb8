"""``python -m runtime.bench SUITE [--json]``: run one benchmark suite and print its figures."""

from __future__ import annotations

import argparse
import importlib
import sys

import orjson

from runtime.bench import SUITES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.bench")
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller workloads (smoke test)")
    args = parser.parse_args(argv)
    module = importlib.import_module(SUITES[args.suite])
    figures = module.run(args)
    if args.json:
        sys.stdout.write(orjson.dumps(figures).decode() + "\n")
    else:
        width = max(map(len, figures), default=0)
        for name, value in figures.items():
            shown = f"{value:,.3f}" if isinstance(value, float) else f"{value:,}"
            print(f"{name:<{width}}  {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
