"""The driving commands of ``powertrio``: run, send, reply and cancel, with the live tree view.

Ctrl-C during a run: the first sends an ``after_turn`` cancel (the round in flight
finishes and is recorded, then the run ends ``cancelled``), the second an ``immediate``
one (the LLM stream and running tools stop now; open calls are closed as interrupted), a
third leaves at once. Either way the log stays consistent and the session can be resumed
with ``powertrio send``.
"""

# Lazy imports of `rich` and of the agents inside functions: each command pays at start-up
# only for what it uses.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, final

import attrs
import trio

from protocols.codec import decode_record
from protocols.errors import ConfigError
from runtime import Runtime, open_runtime

from .._reading._format import plural, shorten
from .._reading._log import SESSION_PREFIX, in_session_tree, resolve_session, session_id_of
from .._reading._sessions import build_tree, recorded_setup
from .._reading._tree import ACTIVE, AgentTree
from .._session._errors import NoOpenRunError
from ._agent import check_cli_agent
from ._common import CliContext, db_lock, open_log
from ._model import (
    HaltLLM,
    ModelChoice,
    choose_model,
    max_tokens_for,
    open_llm,
    spawn_cli_session,
)
from ._progress import StreamProgress
from ._tree_view import render_tree

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

    from actors import RunResult, Session
    from actors.events import HumanRequested, Observation

    from .._reading._log import LogStore

__all__ = ["cmd_cancel", "cmd_reply", "cmd_run", "cmd_send", "result_warnings"]

SETTLE_SECONDS = 3.0
"""How long a finished run waits for its sub-agents to record their own ends."""


# -- the view ------------------------------------------------------------------------------


@final
class RunView:
    """What a person sees while a session runs.

    On a terminal: a live ``rich`` display of the root's streamed text and the agent tree,
    refreshed from the observations. Elsewhere (a pipe, a file): the root's text as it
    streams and one line per sub-agent start and end, then the final tree. With ``--json``
    nothing until the end. While a model answers, its progress (tokens so far, seconds)
    is in the live display's last line, or a status line on stderr when only stderr is a
    terminal.
    """

    def __init__(self, ctx: CliContext, tree: AgentTree) -> None:
        self.ctx = ctx
        self.tree = tree
        self.mode: Literal["live", "plain", "quiet"] = (
            "quiet" if ctx.json else "live" if ctx.out.is_terminal else "plain"
        )
        self.streaming = ""
        self.dirty = False
        self._live: Live | None = None
        self._wrote = False
        self.progress = StreamProgress(time.monotonic)
        self._progress_line: str | None = None
        self._status: Live | None = None

    def start(self) -> None:
        """Begin showing (the live display, on a terminal)."""
        if self.mode == "live" and self._live is None:
            from rich.live import Live

            self._live = Live(
                self._renderable(), console=self.ctx.out, auto_refresh=False, transient=True
            )
            self._live.start()

    def stop(self) -> None:
        """Stop the live display (whatever streamed is printed for good)."""
        live, self._live = self._live, None
        if live is not None:
            live.stop()
        status, self._status = self._status, None
        if status is not None:
            status.stop()
        if self.streaming and self.mode == "live":
            self.ctx.out.print(self.streaming)
        self.streaming = ""
        if self._wrote:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._wrote = False

    def note(self, text: str) -> None:
        """Tell the person something (above the live display, or on stderr)."""
        if self.mode == "live":
            self.ctx.out.print(f"[yellow]{text}[/]")
            self.dirty = True
        elif self.mode == "plain":
            self.ctx.err.print(text)

    def observe(self, observation: Observation) -> None:
        """Take one observation in."""
        from actors.events import DeltaReceived, LLMCallFinished, RunBegan, RunEnded

        self.tree.observe(observation)
        self.progress.observe(observation)
        self.dirty = True
        if isinstance(observation, RunEnded):
            sid = observation.result.session_id
            if sid != self.tree.root_id and self.mode == "plain":
                self._line(f"  ⤶ {self.tree.node(sid).name} {sid} {observation.result.status}")
            return
        root = observation.session_id == self.tree.root_id
        if isinstance(observation, DeltaReceived) and root:
            delta = observation.delta
            text = getattr(delta, "text", None)
            if getattr(delta, "type", "") == "text" and isinstance(text, str):
                if self.mode == "live":
                    self.streaming += text
                elif self.mode == "plain":
                    sys.stdout.write(text)
                    sys.stdout.flush()
                    self._wrote = True
        elif isinstance(observation, LLMCallFinished) and root:
            if self.mode == "live" and self.streaming:
                from rich.text import Text

                self.ctx.out.print(Text(self.streaming))
            self.streaming = ""
            if self._wrote:
                sys.stdout.write("\n")
                sys.stdout.flush()
                self._wrote = False
        elif isinstance(observation, RunBegan) and not root and self.mode == "plain":
            sid = observation.session_id
            self._line(f"  ⤷ sub-agent {sid} started: {shorten(observation.input, 60)}")

    def _line(self, text: str) -> None:
        if self._wrote:
            sys.stdout.write("\n")
            self._wrote = False
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def refresh(self) -> None:
        """Redraw the live display (or the progress line on stderr) if anything changed."""
        line = self.progress.line()
        if line != self._progress_line:
            self._progress_line = line
            self.dirty = True
            self._show_progress(line)
        if self._live is not None and self.dirty:
            self.dirty = False
            self._live.update(self._renderable(), refresh=True)

    def _show_progress(self, line: str | None) -> None:
        """The progress as a status line on stderr, when stdout does not show it live."""
        if self.mode == "live" or not self.ctx.err.is_terminal:
            return
        from rich.live import Live
        from rich.spinner import Spinner

        if line is None:
            status, self._status = self._status, None
            if status is not None:
                status.stop()
        elif self._status is None:
            # Not Console.status: that one takes stdout over too, where the answer goes.
            self._status = Live(
                Spinner("dots", line),
                console=self.ctx.err,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._status.start(refresh=True)
        else:
            self._status.update(Spinner("dots", line), refresh=True)

    def _renderable(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        parts: list[RenderableType] = []
        if self.streaming:
            tail = "\n".join(self.streaming.splitlines()[-6:])
            parts.append(Text(tail))
        parts.append(render_tree(self.tree))
        parts.append(
            Text(
                f"{plural(len(self.tree.nodes), 'agent')} · "
                f"{plural(self.tree.total_tokens, 'token')} · "
                "Ctrl-C: cancel after this turn, twice: stop now",
                style="dim",
            )
        )
        if self._progress_line is not None:
            parts.append(Text(self._progress_line, style="cyan"))
        return Group(*parts)


# -- driving a session -----------------------------------------------------------------------


@final
@attrs.define(eq=False)
class _Drive:
    interrupts: int = 0
    prompt: trio.CancelScope | None = None


async def _consume(observations: trio.MemoryReceiveChannel[Observation], view: RunView) -> None:
    async for observation in observations:
        view.observe(observation)


async def _refresh(view: RunView) -> None:
    while True:
        view.refresh()
        await trio.sleep(0.1)


async def _watch_children(store: LogStore, view: RunView, from_position: int) -> None:
    """Name the sub-agents (their spec and task) from the ``ChildSpawned`` events."""
    root = view.tree.root_id
    async for record in store.subscribe(from_position, prefix=SESSION_PREFIX + root):
        sid = session_id_of(record.stream)
        if record.type == "session.child_spawned" and sid and in_session_tree(root, sid):
            view.tree.apply(sid, decode_record(record))
            view.dirty = True


async def _watch_sigint(session: Session, view: RunView, drive: _Drive) -> None:
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            drive.interrupts += 1
            if drive.interrupts == 1:
                view.note("Ctrl-C: cancelling after the current turn (Ctrl-C again: stop now)")
                if drive.prompt is not None:
                    drive.prompt.cancel()
                await session.cancel("Ctrl-C at the terminal", mode="after_turn", by="cli")
            elif drive.interrupts == 2:
                view.note("Ctrl-C again: stopping now")
                await session.cancel("Ctrl-C twice at the terminal", mode="immediate", by="cli")
            else:
                raise KeyboardInterrupt


async def _ask_person(view: RunView, request: HumanRequested, drive: _Drive) -> str | None:
    """Ask the person at the terminal; ``None`` when Ctrl-C came first."""
    from rich.markup import escape

    view.stop()
    out = view.ctx.out
    if request.kind == "question":
        out.print(f"[bold blue]? the agent asks:[/] {escape(request.prompt)}")
        prompt = "your answer> "
    else:
        out.print(f"[bold blue]? approval needed:[/] {escape(request.prompt)}")
        prompt = "allow? [y/N]> "
    answer: str | None = None
    with trio.CancelScope() as scope:
        drive.prompt = scope
        answer = await trio.to_thread.run_sync(input, prompt, abandon_on_cancel=True)
    drive.prompt = None
    view.start()
    return answer


async def _settle(view: RunView, store: LogStore) -> None:
    """Let sub-agents record their ends (a cancel reaches them just after their parent's),
    then show the tree as the log has it: the log is the authority."""
    root = view.tree.root_id
    with trio.move_on_after(SETTLE_SECONDS):
        # A bounded poll of what the observations update (not a synchronisation point).
        while any(node.status in ACTIVE for sid, node in view.tree.nodes.items() if sid != root):  # noqa: ASYNC110
            await trio.sleep(0.05)
    settled = await build_tree(store, root, live=True)
    settled.root.name = view.tree.root.name
    view.tree = settled
    view.dirty = True


async def answer_request(session: Session, request: HumanRequested, answer: str) -> RunResult:
    """Answer a question, or approve (``y``, ``yes``...) or deny (anything else) a call."""
    if request.kind == "question":
        return await session.reply(request.request_id, answer)
    if answer.strip().lower() in {"y", "yes", "approve", "allow", "ok"}:
        return await session.approve(request.request_id)
    return await session.deny(request.request_id, answer.strip())


async def drive(
    view: RunView,
    store: LogStore,
    session: Session,
    start: Callable[[], Awaitable[RunResult]],
    *,
    interactive: bool,
) -> RunResult:
    """Run ``start`` (a send, follow-up or reply) with the view, Ctrl-C handling and human
    questions answered at the terminal; return the run's result."""
    state = _Drive()
    head = await store.head_position()
    async with trio.open_nursery() as nursery:
        with session.observe(4096) as observations:
            nursery.start_soon(_consume, observations, view)
            nursery.start_soon(_refresh, view)
            nursery.start_soon(_watch_children, store, view, head + 1)
            nursery.start_soon(_watch_sigint, session, view, state)
            view.start()
            try:
                result = await start()
                while result.status == "waiting_for_human" and interactive and not state.interrupts:
                    request = result.human_requests[0]
                    answer = await _ask_person(view, request, state)
                    if answer is None:
                        result = await session.wait(result.run_id)
                        break
                    result = await answer_request(session, request, answer)
                await _settle(view, store)
            finally:
                view.stop()
                nursery.cancel_scope.cancel()
    return result


def result_json(
    result: RunResult, tree: AgentTree, choice: ModelChoice | None
) -> dict[str, object]:
    """A run's outcome for ``--json``."""
    usage = result.usage
    return {
        "session_id": result.session_id,
        "run_id": result.run_id,
        "status": result.status,
        "text": result.text,
        "rounds": result.rounds,
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
        "error": result.error,
        "error_code": result.error_code,
        "truncated": result.truncated,
        "unknown_tool_results": list(result.unknown_tool_results),
        "human_requests": [
            {"request_id": r.request_id, "kind": r.kind, "prompt": r.prompt}
            for r in result.human_requests
        ],
        "model": None if choice is None else choice.label,
        "tree": tree.to_json(),
    }


def result_warnings(result: RunResult) -> list[str]:
    """What a person must know of a run beyond its status: one line each."""
    lines: list[str] = []
    if result.truncated:
        lines.append(
            "the last answer was cut off by the token limit (finish reason length): "
            "raise --max-tokens"
        )
    if result.unknown_tool_results:
        lines.append(
            "tool results unknown (the process stopped while they ran): "
            + ", ".join(result.unknown_tool_results)
        )
    return lines


def report(
    ctx: CliContext, result: RunResult, view: RunView, choice: ModelChoice, runtime: Runtime
) -> int:
    """Print how the run ended; the exit code (0 only for ``completed``)."""
    code = 0 if result.status == "completed" else 1
    if ctx.json:
        ctx.emit(result_json(result, view.tree, choice))
        return code
    from rich.markup import escape

    out = ctx.out
    if view.mode in {"plain", "live"}:
        out.print(render_tree(view.tree))
    style = "green" if code == 0 else "yellow"
    sid = result.session_id
    out.print(
        f"[{style}]{result.status.replace('_', ' ')}[/] · session {sid} · "
        f"{plural(result.rounds, 'round')} · "
        f"{plural(result.usage.total_tokens, 'token')} (tree) · model {escape(choice.label)}"
    )
    if result.error:
        out.print(f"[red]{escape(result.error)}[/]")
    for line in result_warnings(result):
        out.print(f"[yellow]warning:[/] {escape(line)}")
    for request in result.human_requests:
        out.print(
            f"[blue]waiting for a human:[/] {escape(request.prompt)}\n"
            f'  answer with: powertrio reply {sid} {request.request_id} "..."'
        )
    timers = runtime.timers.pending(SESSION_PREFIX + sid)
    if timers:
        out.print(
            f"[dim]{len(timers)} wake-up(s) pending: `powertrio timers`; they fire while the "
            f"session runs (`powertrio send {sid} ...`)[/]"
        )
    out.print(f"[dim]see: powertrio show {sid} · powertrio tree {sid} · powertrio log {sid}[/]")
    return code


def _interactive(ctx: CliContext) -> bool:
    return not ctx.json and sys.stdin.isatty() and ctx.out.is_terminal


# -- the commands ----------------------------------------------------------------------------


def _require_text(text: str, what: str, *, example: str) -> None:
    """Refuse empty input before any session is created or resumed for it.

    Raises:
        ConfigError: ``text`` is empty or only white space.
    """
    if not text.strip():
        msg = f"{what} is empty: a model needs something to answer, e.g. `{example}`"
        raise ConfigError(msg)


async def cmd_run(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio run "task"``: start an agent on the task and watch its tree work."""
    _require_text(args.task, "the task", example='powertrio run "Plan the launch"')
    choice = choose_model(args)
    if choice.note:
        ctx.err.print(f"[yellow]{choice.note}[/]")
    interactive = _interactive(ctx)
    max_tokens = max_tokens_for(args, choice)
    with db_lock(ctx, "run"):
        async with (
            open_log(ctx, create=True) as store,
            open_llm(ctx, choice) as llm,
            open_runtime(store=store) as runtime,
        ):
            session = await spawn_cli_session(
                runtime, llm, session_id=None, interactive=interactive, max_tokens=max_tokens
            )
            tree = AgentTree(session.id)
            tree.root.task = args.task
            view = RunView(ctx, tree)
            if view.mode != "quiet":
                ctx.err.print(f"[dim]session {session.id} · model {choice.label} · log {ctx.db}[/]")
            result = await drive(
                view,
                store,
                session,
                lambda: session.send(args.task, max_rounds=args.max_rounds),
                interactive=interactive,
            )
            return report(ctx, result, view, choice, runtime)


async def _resumed(
    ctx: CliContext,
    args: argparse.Namespace,
    command: str,
    start: Callable[[Session, Runtime], Awaitable[RunResult]],
) -> int:
    """Resume a session from the log with the configured model and drive ``start``.

    Raises:
        ForeignAgentError: the session's recorded agent is not the CLI's (nothing is
            recorded then).
    """
    choice = choose_model(args)
    if choice.note:
        ctx.err.print(f"[yellow]{choice.note}[/]")
    interactive = _interactive(ctx)
    with db_lock(ctx, command):
        async with open_log(ctx) as store:
            session_id = await resolve_session(store, args.session)
            # A session keeps the agent and parameters it had, wherever it is resumed (a
            # question asked off a terminal waits for `powertrio reply`); one the CLI
            # cannot rebuild is refused before anything is recorded.
            agent = await check_cli_agent(store, session_id, action=f"powertrio {command}")
            tree = await build_tree(store, session_id, live=True)
            setup = await recorded_setup(store, session_id)
            ask_human = setup.ask_human if setup.recorded else interactive
            max_tokens = max_tokens_for(args, choice)
            if max_tokens is None and args.max_tokens is None:
                max_tokens = setup.max_tokens
            async with open_llm(ctx, choice) as llm, open_runtime(store=store) as runtime:
                session = await spawn_cli_session(
                    runtime,
                    llm,
                    session_id=session_id,
                    interactive=ask_human,
                    max_tokens=max_tokens,
                    model=setup.model,
                    temperature=setup.temperature,
                    max_rounds=agent.max_rounds,
                )
                view = RunView(ctx, tree)
                result = await drive(
                    view, store, session, lambda: start(session, runtime), interactive=interactive
                )
                return report(ctx, result, view, choice, runtime)


async def cmd_send(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio send ID "text"``: a follow-up; it starts a run on an idle session, or joins
    the open run of an interrupted one; waits for that run.

    With ``--id X`` the text is its own run ``X`` (queued behind an open run), recorded at
    most once: the same command run again, after a crash or not, waits for that run or
    shows how it ended."""
    _require_text(args.text, "the text", example='powertrio send ID "one more thing"')

    async def start(session: Session, runtime: Runtime) -> RunResult:
        if args.id is not None:  # a run of its own, once per id (Session.send's retry)
            return await session.send(args.text, id=args.id)
        before = await session.state()
        follow_up_id = runtime.ids.new("fu")
        await session.follow_up(args.text, id=follow_up_id)
        run_id = before.run.started.run_id if before.run is not None else f"fu-{follow_up_id}"
        return await session.wait(run_id)

    return await _resumed(ctx, args, "send", start)


async def cmd_reply(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio reply ID REQUEST "answer"``: answer what a run waits for, and let it go on.

    For an approval, ``y``/``yes``/``approve``/``allow`` allows the call; any other answer
    denies it and is given to the model as the reason.
    """

    async def start(session: Session, runtime: Runtime) -> RunResult:
        state = await session.state()
        open_requests = state.run.human if state.run is not None else ()
        request = next((r for r in open_requests if r.request_id == args.request), None)
        if request is None:  # the session says which requests are open, with its error code
            return await session.reply(args.request, args.answer)
        return await answer_request(session, request, args.answer)

    return await _resumed(ctx, args, "reply", start)


async def cmd_cancel(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio cancel ID``: end the open run of a session that no process is driving.

    The session is resumed from the log with a model that never answers and cancelled at
    once (``immediate``): open tool calls are closed as interrupted and sub-agents are
    cancelled with it. A session with no open run is an error (``session.no_open_run``),
    and so is one whose agent is not the CLI's (``session.foreign_agent``): the session
    resumed here would take its next steps with the CLI's tools until the cancel lands.
    (A session a ``run`` is driving is cancelled with Ctrl-C in its terminal.)
    """
    with db_lock(ctx, "cancel"):
        async with open_log(ctx) as store:
            session_id = await resolve_session(store, args.session)
            agent = await check_cli_agent(store, session_id, action="powertrio cancel")
            async with open_runtime(store=store) as runtime:
                session = await spawn_cli_session(
                    runtime,
                    HaltLLM(),
                    session_id=session_id,
                    interactive=agent.ask_human,
                    max_rounds=agent.max_rounds,
                )
                state = await session.state()
                status: str | None = None
                run_id: str | None = None
                if state.run is not None:
                    run_id = state.run.started.run_id
                    reason = args.reason or "cancelled with `powertrio cancel`"
                    await session.cancel(reason, mode="immediate", by="cli")
                    with trio.move_on_after(30):
                        status = (await session.wait(run_id)).status
    if run_id is None:
        raise NoOpenRunError(session_id)
    if ctx.json:
        ctx.emit({"session_id": session_id, "cancelled": True, "run_id": run_id, "status": status})
    else:
        ctx.out.print(f"cancelled run {run_id} of session {session_id} ({status or 'stopping'})")
    return 0
