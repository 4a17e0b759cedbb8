"""A model's progress on a terminal: loading the local model, then tokens as they stream.

Terminals are rich consoles over a buffer that say they are one (``force_terminal``); a
pipe is the same console saying it is not. What goes to a pipe must not change.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

from actors import RunResult
from actors._reading._tree import AgentTree
from actors.cli import _model
from actors.cli._common import CliContext
from actors.cli._progress import StreamProgress
from actors.cli._run import RunView
from actors.events import DeltaReceived, LLMCallFinished, Observation, RoundBegan, RunEnded
from protocols import Usage
from protocols.streaming import TextDelta, UsageDelta


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _round(session: str = "s") -> RoundBegan:
    return RoundBegan(session_id=session, run_id="r", round=1)


def _piece(text: str, session: str = "s") -> DeltaReceived:
    return DeltaReceived(session_id=session, run_id="r", round=1, delta=TextDelta(text))


def _finished(session: str = "s") -> LLMCallFinished:
    return LLMCallFinished(
        session_id=session,
        run_id="r",
        round=1,
        model="m",
        finish_reason="stop",
        usage=Usage(),
        tool_calls=0,
    )


def test_progress_says_what_the_calls_in_flight_have_done() -> None:
    """Reading the prompt, then tokens and seconds; several calls are counted together;
    a finished call (or an ended run) leaves the line."""
    clock = _Clock()
    progress = StreamProgress(clock)
    assert progress.line() is None
    progress.observe(_round())
    clock.now += 7.2
    assert progress.line() == "the model: reading the prompt · 7 s"
    for text in ("Hello", ",", " world"):
        progress.observe(_piece(text))
    clock.now += 2.0
    assert progress.line() == "the model: 3 tokens · 9 s"
    progress.observe(_round("s.1"))
    progress.observe(_piece("Hi", "s.1"))
    progress.observe(
        DeltaReceived(session_id="s.1", run_id="r", round=1, delta=UsageDelta(Usage()))
    )
    assert progress.line() == "2 model calls: 4 tokens · 9 s"
    progress.observe(_finished())
    assert progress.line() == "the model: 1 tokens · 0 s"
    ended = RunResult(
        session_id="s.1", run_id="r", status="failed", text="", rounds=1, usage=Usage()
    )
    progress.observe(RunEnded(result=ended))
    assert progress.line() is None


def _context(tmp_path: Path, *, out_terminal: bool, err_terminal: bool) -> CliContext:
    ctx = CliContext.create(db=str(tmp_path / "powertrio.sqlite"), json=False, debug=False)
    ctx.out = Console(file=io.StringIO(), force_terminal=out_terminal, color_system=None, width=120)
    ctx.err = Console(file=io.StringIO(), force_terminal=err_terminal, color_system=None, width=120)
    return ctx


def _written(console: Console) -> str:
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def _stream(view: RunView, observations: list[Observation]) -> None:
    view.start()
    for observation in observations:
        view.observe(observation)
        view.refresh()
    view.stop()


def test_with_stdout_piped_the_progress_is_a_status_line_on_the_terminal_s_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``powertrio run ... > answer.txt`` at a terminal: the answer goes to the file, the
    progress to stderr, where the person sees it."""
    ctx = _context(tmp_path, out_terminal=False, err_terminal=True)
    view = RunView(ctx, AgentTree("s"))
    _stream(view, [_round(), _piece("Hello"), _piece(" world"), _finished()])
    assert capsys.readouterr().out == "Hello world\n"
    shown = _written(ctx.err)
    assert "the model: reading the prompt · 0 s" in shown
    assert "the model: 2 tokens · 0 s" in shown


def test_in_a_live_display_the_progress_is_its_last_line(tmp_path: Path) -> None:
    """On a terminal the live display's last line says how far the answer has come."""
    ctx = _context(tmp_path, out_terminal=True, err_terminal=True)
    view = RunView(ctx, AgentTree("s"))
    _stream(view, [_round(), _piece("Hello"), _piece(" world")])
    assert "the model: 2 tokens · 0 s" in _written(ctx.out)
    assert _written(ctx.err) == ""


def test_nothing_of_the_progress_reaches_a_pipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither stdout nor stderr a terminal: the streamed text and nothing else."""
    ctx = _context(tmp_path, out_terminal=False, err_terminal=False)
    view = RunView(ctx, AgentTree("s"))
    _stream(view, [_round(), _piece("Hello"), _piece(" world"), _finished()])
    assert capsys.readouterr().out == "Hello world\n"
    assert _written(ctx.err) == ""


@contextmanager
def _instant_server() -> Iterator[str]:
    yield "http://127.0.0.1:9"


@pytest.mark.parametrize("terminal", [True, False])
async def test_loading_the_local_model_shows_on_a_terminal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    """The local model's loading is a status line, then one line with how long it took;
    on a pipe, nothing."""
    monkeypatch.setattr(_model, "open_local_llm_server", _instant_server)
    ctx = _context(tmp_path, out_terminal=False, err_terminal=terminal)
    choice = _model.ModelChoice(kind="local", label="smollm2-135m (local llama.cpp)")
    async with _model.open_llm(ctx, choice):
        pass
    shown = _written(ctx.err)
    if terminal:
        assert "loading the local model (smollm2-135m)…" in shown
        assert shown.endswith("the local model is ready (0 s)\n")
    else:
        assert shown == ""
