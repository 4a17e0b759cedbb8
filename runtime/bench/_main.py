"""The command line shared by the benchmark packages: pick a suite, run it, print its figures."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, TypeAlias

import orjson

from protocols.errors import ConfigError

Figures: TypeAlias = dict[str, float | int | str]
"""What a suite's ``run(args)`` returns: figure name -> value, each beside its baseline."""


def rss_bytes() -> int:
    """The current resident set size of this process, in bytes (Linux's ``statm``)."""
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def in_fresh_process(function: str, *args: str) -> Any:
    """Run ``module:function(*args)`` under ``trio.run`` in a new interpreter; its result,
    which must be a JSON value.

    For figures a process's history would skew, such as memory per idle actor measured
    after a throughput workload has grown the heap.
    """
    module, _, name = function.partition(":")
    code = (
        f"import sys, orjson, trio; from {module} import {name}; "
        f"print(orjson.dumps(trio.run({name}, *sys.argv[1:])).decode())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return orjson.loads(done.stdout)


def main(argv: list[str] | None, *, suites: Mapping[str, str], prog: str) -> int:
    """Run the suite named in ``argv`` (one of ``suites``) and print its figures."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("suite", choices=sorted(suites))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller workloads (smoke test)")
    known, _ = parser.parse_known_args(argv)
    module = importlib.import_module(suites[known.suite])
    # A suite may take options of its own (``fleet_sim --nodes 200``).
    add_arguments = getattr(module, "add_arguments", None)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        figures: Figures = module.run(args)
    except ConfigError as exc:  # the suite cannot run here, e.g. its baseline is missing
        sys.stderr.write(f"{prog} {args.suite}: error [{exc.code}]: {exc}\n")
        return 2
    if args.json:
        sys.stdout.write(orjson.dumps(figures).decode() + "\n")
    else:
        width = max(map(len, figures), default=0)
        for name, value in figures.items():
            shown = (
                f"{value:,.3f}"
                if isinstance(value, float)
                else (f"{value:,}" if isinstance(value, int) else value)
            )
            print(f"{name:<{width}}  {shown}")
    return 0
