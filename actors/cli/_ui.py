"""``powertrio ui``: the web console over the log, and the operator that lets its forms
act on sessions the way ``send``, ``reply``, ``cancel`` and ``fork`` do."""

# Lazy imports of the agents inside functions: `--help` stays quick.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, final

import trio

from protocols.errors import ConfigError
from runtime import Clock, IdSource, Runtime, open_runtime

from .._reading._sessions import build_tree, recorded_setup
from .._reading._tree import ACTIVE
from .._session._errors import HumanRequestNotFoundError, NoOpenRunError
from ._agent import check_cli_agent
from ._common import CliContext, db_in_use, db_lock, open_log
from ._inspect import load_actors
from ._model import (
    HaltLLM,
    ModelChoice,
    choose_model,
    max_tokens_for,
    open_llm,
    spawn_cli_session,
)
from ._run import SETTLE_SECONDS, answer_request

if TYPE_CHECKING:
    from actors import Price, Session
    from actors.console import Verdict

    from .._reading._log import LogStore

__all__ = ["CliOperator", "cmd_ui"]

Act = Callable[["Session", Runtime], Awaitable[tuple[str, Callable[[], Awaitable[object]]]]]
"""Records what the person asked (a follow-up, an answer...) and returns a line for them
and what to wait for next (the run)."""


@final
class CliOperator:
    """Acts on a session the way the CLI does: takes the log's driver lock, resumes the
    session from the log with the model the options choose and the tools and parameters
    it had, records the request, and drives the run to its end in the background. A
    session whose agent is not the CLI's is refused (``session.foreign_agent``).

    One session at a time: while a run driven from here is going, another action on the
    log is refused with ``store.locked`` (as a second ``powertrio send`` would be).
    """

    def __init__(
        self,
        ctx: CliContext,
        store: LogStore,
        args: argparse.Namespace,
        nursery: trio.Nursery,
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.args = args
        self.nursery = nursery

    async def follow_up(self, session_id: str, text: str) -> str:
        async def act(
            session: Session, runtime: Runtime
        ) -> tuple[str, Callable[[], Awaitable[object]]]:
            before = await session.state()
            follow_up_id = runtime.ids.new("fu")
            await session.follow_up(text, id=follow_up_id)
            run = before.run.started.run_id if before.run is not None else f"fu-{follow_up_id}"
            return f"follow-up sent to {session_id} (run {run})", partial(session.wait, run)

        return await self._drive(session_id, act)

    async def answer(self, session_id: str, request_id: str, answer: str, verdict: Verdict) -> str:
        async def act(
            session: Session, runtime: Runtime
        ) -> tuple[str, Callable[[], Awaitable[object]]]:
            state = await session.state()
            open_requests = state.run.human if state.run is not None else ()
            request = next((r for r in open_requests if r.request_id == request_id), None)
            if request is None:
                ids = tuple(r.request_id for r in open_requests)
                raise HumanRequestNotFoundError(session_id, request_id, ids)
            if verdict == "approve":
                reply = "yes"
            elif verdict == "deny":
                reply = answer.strip() or "no"
                if reply.lower() in {"y", "yes", "approve", "allow", "ok"}:
                    reply = f"denied: {reply}"
            else:
                reply = answer
            # The same messages as `powertrio reply` (a question's answer, or y/no+reason).
            what = {"approve": "approved", "deny": "denied"}.get(verdict, "answered")
            if request.kind == "question":
                what = "answered"
            return f"{what} {request_id} of {session_id}", partial(
                answer_request, session, request, reply
            )

        return await self._drive(session_id, act)

    async def cancel(self, session_id: str, reason: str) -> str:
        async def act(
            session: Session, runtime: Runtime
        ) -> tuple[str, Callable[[], Awaitable[object]]]:
            state = await session.state()
            if state.run is None:
                raise NoOpenRunError(session_id)
            run_id = state.run.started.run_id
            await session.cancel(reason, mode="immediate", by="console")
            return f"cancelled run {run_id} of {session_id}", partial(session.wait, run_id)

        # As `powertrio cancel`: a model that never answers, so the resumed run asks
        # nothing of a real one before the cancel lands.
        return await self._drive(session_id, act, halt=True)

    async def fork(self, session_id: str, at_version: int, new_id: str | None) -> str:
        from actors import fork_session

        new_id = new_id or IdSource(Clock()).new("ses")
        if "/" in new_id or "." in new_id:
            msg = f"a session id has no '/' or '.' (sub-agents use '.'), got {new_id!r}"
            raise ConfigError(msg)
        with db_lock(self.ctx.db, "ui", wait=0):
            return await fork_session(self.store, session_id, at_version=at_version, new_id=new_id)

    async def _drive(self, session_id: str, act: Act, *, halt: bool = False) -> str:
        note: str = await self.nursery.start(partial(self._run, session_id, act, halt=halt))
        return note

    async def _run(
        self,
        session_id: str,
        act: Act,
        *,
        halt: bool = False,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        choice = ModelChoice(kind="demo", label="none") if halt else choose_model(self.args)
        with db_lock(self.ctx.db, "ui", wait=0):
            # Only the CLI's own agent is rebuilt here; any other is refused, unrecorded.
            agent = await check_cli_agent(self.store, session_id, action="the console")
            setup = await recorded_setup(self.store, session_id)
            max_tokens = max_tokens_for(self.args, choice)
            if max_tokens is None and self.args.max_tokens is None:
                max_tokens = setup.max_tokens
            async with (
                open_llm(self.ctx, choice) as chosen,
                open_runtime(store=self.store) as runtime,
            ):
                session = await spawn_cli_session(
                    runtime,
                    HaltLLM() if halt else chosen,
                    session_id=session_id,
                    interactive=setup.ask_human,
                    max_tokens=max_tokens,
                    model=setup.model,
                    temperature=setup.temperature,
                    max_rounds=agent.max_rounds,
                )
                note, wait = await act(session, runtime)
                task_status.started(note)
                try:
                    await wait()
                    await self._settle(session_id)
                except Exception as exc:  # the run's own log says what went wrong
                    self.ctx.err.print(f"[red]{session_id}: {type(exc).__name__}: {exc}[/]")

    async def _settle(self, session_id: str) -> None:
        """Let sub-agents record their ends before the runtime closes (as ``send`` does)."""
        with trio.move_on_after(SETTLE_SECONDS):
            while True:
                tree = await build_tree(self.store, session_id, live=True)
                if not any(
                    node.status in ACTIVE for sid, node in tree.nodes.items() if sid != session_id
                ):
                    return
                await trio.sleep(0.1)


def _prices(given: list[str] | None) -> dict[str, Price]:
    """``MODEL=PROMPT,COMPLETION`` (USD per million tokens) options as prices."""
    from actors import Price

    prices: dict[str, Price] = {}
    for item in given or ():
        model, _, rates = item.partition("=")
        prompt, _, completion = rates.partition(",")
        try:
            prices[model.strip()] = Price(prompt=float(prompt), completion=float(completion))
        except ValueError:
            msg = f"--price takes MODEL=PROMPT,COMPLETION in USD per million tokens, got {item!r}"
            raise ConfigError(msg) from None
        if not model.strip():
            msg = f"--price needs a model name before '=', got {item!r}"
            raise ConfigError(msg)
    return prices


async def cmd_ui(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio ui``: serve the web console over the log until Ctrl-C.

    Listens on 127.0.0.1 by default; any other address needs ``--token`` (or
    ``POWERTRIO_UI_TOKEN``), and the console refuses to start without one.
    """
    from actors.console import check_bind, console_app, serve_console

    token = args.token or os.environ.get("POWERTRIO_UI_TOKEN") or None
    check_bind(args.host, token)
    prices = _prices(args.price)
    load_actors()
    async with open_log(ctx) as store, trio.open_nursery() as nursery:
        operator = CliOperator(ctx, store, args, nursery)
        app = console_app(
            store,
            operator=operator,
            token=token,
            live=lambda: db_in_use(ctx),
            prices=prices,
            where=str(ctx.db),
        )
        url: str = await nursery.start(
            partial(serve_console, app, host=args.host, port=args.port, token=token)
        )
        if ctx.json:
            ctx.emit({"url": url + "/", "db": str(ctx.db)})
        else:
            login = " (open it with ?token=... once)" if token else ""
            ctx.err.print(f"console on [bold]{url}/[/]{login} · log {ctx.db} · Ctrl-C stops it")
    return 0
