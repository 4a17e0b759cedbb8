"""Crash-test child for examples/07_research_app.py: run the app on a log, hang where told.

Usage: ``python tests/_research_app_child.py DB_PATH CALLS_FILE [HANG_AT]``.

Every model call appends its request fingerprint to ``CALLS_FILE`` (one line, flushed);
the ``HANG_AT``-th call writes ``hanging`` instead and blocks, so the parent can SIGKILL
the process mid-run. Without ``HANG_AT`` the app runs to its end and prints its results.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import trio
import trio.testing

from protocols import LLMRequest, LLMResponse
from runtime.testing import FunctionLLM

EXAMPLE = Path(__file__).parent.parent / "examples" / "07_research_app.py"


def load_app():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("research_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["research_app"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    db, calls_file = Path(sys.argv[1]), Path(sys.argv[2])
    hang_at = int(sys.argv[3]) if len(sys.argv) > 3 else None
    app = load_app()
    made = 0

    def model(request: LLMRequest) -> LLMResponse:
        nonlocal made
        made += 1
        line = "hanging" if made == hang_at else request.fingerprint()
        with calls_file.open("a") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
        if made == hang_at:
            time.sleep(300)  # the parent kills the process here
        return app.model(request)

    async def run() -> None:
        results = await app.run_app(db, FunctionLLM(model))
        for result in results:
            print(f"[{result.status}] {result.text}")

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


if __name__ == "__main__":
    main()
