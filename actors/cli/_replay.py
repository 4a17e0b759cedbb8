"""``powertrio replay`` and ``powertrio fork``: check a recorded session against this code,
and branch a session off at an event of its log."""

# Lazy imports of `rich` and of the agents inside functions: each command pays at start-up
# only for what it uses.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from protocols.errors import ConfigError
from runtime import Clock, IdSource

from .._reading._format import plural
from .._reading._log import SESSION_PREFIX, resolve_session
from .._reading._sessions import recorded_setup
from ._common import CliContext, db_lock, open_log

if TYPE_CHECKING:
    from rich.tree import Tree

    from actors import SessionReplay


__all__ = ["cmd_fork", "cmd_replay"]


def _replay_json(replayed: SessionReplay) -> dict[str, object]:
    return {
        "session_id": replayed.session_id,
        "version": replayed.version,
        "checked": replayed.checked,
        "children": [_replay_json(child) for child in replayed.children],
    }


def _replay_tree(replayed: SessionReplay, branch: Tree | None = None) -> Tree:
    from rich.tree import Tree

    label = (
        f"[green]✔[/] {replayed.session_id}  [dim]{plural(replayed.version, 'event')} · "
        f"{plural(replayed.checked, 'model answer')} checked[/]"
    )
    node = Tree(label, guide_style="dim") if branch is None else branch.add(label)
    for child in replayed.children:
        _replay_tree(child, node)
    return node


async def cmd_replay(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio replay ID``: re-run a session tree's decisions from its log, no model.

    Any tree replays, whatever tools its application gave it: no tool runs in a replay,
    and the tool set recorded with each request stands in for the application's code,
    which the CLI does not have. What the CLI does have is checked: every recorded model
    answer must have been asked for by the request the session's decision code builds now
    (the recorded prompt, the model parameters, the conversation with every call in
    order); the first difference is a ``replay.divergence`` error naming the stream, the
    version and the diff (exit 1). To check an application's own tools and prompts too,
    replay from Python with its spec (``actors.replay_session(store, id, SPEC)``).
    ``--from N`` takes the log up to version ``N`` as recorded and checks what came after.
    """
    from actors import replay_session

    async with open_log(ctx) as store:
        session_id = await resolve_session(store, args.session)
        setup = await recorded_setup(store, session_id)
        replayed = await replay_session(
            store,
            session_id,
            recorded_tools=True,
            model=setup.model,
            max_tokens=setup.max_tokens,
            temperature=setup.temperature,
            from_version=args.from_version,
        )
    if ctx.json:
        ctx.emit({"ok": True, "total_checked": replayed.total_checked} | _replay_json(replayed))
        return 0
    ctx.out.print(_replay_tree(replayed))
    ctx.out.print(
        f"replayed {session_id}: {replayed.total_checked} model answers asked for again, "
        "identically; no model or tool was called"
    )
    return 0


async def cmd_fork(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio fork ID --at N [--as NEW]``: a new session whose history is the first
    ``N`` events of ``ID`` (its sub-agents forked along); the original is untouched.

    Continue the fork with ``powertrio send NEW "..."``.
    """
    from actors import fork_session

    with db_lock(ctx, "fork"):
        async with open_log(ctx) as store:
            session_id = await resolve_session(store, args.session)
            new_id = args.new_id or IdSource(Clock()).new("ses")
            if "/" in new_id or "." in new_id:
                msg = f"a session id has no '/' or '.' (sub-agents use '.'), got {new_id!r}"
                raise ConfigError(msg)
            await fork_session(store, session_id, at_version=args.at, new_id=new_id)
            length = await store.stream_version(SESSION_PREFIX + new_id)
    if ctx.json:
        ctx.emit(
            {
                "session_id": new_id,
                "forked_from": session_id,
                "at_version": args.at,
                "events": length,
            }
        )
        return 0
    events = plural(length, "event")
    ctx.out.print(
        f"forked {session_id} at version {args.at} as [bold]{new_id}[/] ({events})\n"
        f'[dim]continue it: powertrio send {new_id} "..." · see: powertrio show {new_id}[/]'
    )
    return 0
