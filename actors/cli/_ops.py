"""The log-keeping commands of ``powertrio``: check, export, import, and bench."""

# Lazy imports of `rich` and of the agents inside functions: each command pays at start-up
# only for what it uses.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from protocols.errors import (
    ConfigError,
    InputFileNotFoundError,
    OutputFileError,
    PowertrioError,
    StoreError,
)
from runtime.maintenance import CheckProblem, CheckReport, check_store, export_jsonl, import_jsonl

from .._reading._format import plural
from .._reading._log import SESSION_PREFIX, resolve_session
from ._common import CliContext, db_lock, open_log

if TYPE_CHECKING:
    from actors import SessionState

    from .._reading._log import LogStore

__all__ = ["cmd_bench", "cmd_check", "cmd_export", "cmd_import"]


# -- check ---------------------------------------------------------------------------------


def _session_fold() -> tuple[
    Callable[[str], SessionState | None], Callable[[object, object], object]
]:
    """``initial`` and ``evolve`` that fold session streams (other streams are only decoded)."""
    from actors import SessionState

    from .._session._events import evolve as session_evolve

    def initial(stream: str) -> SessionState | None:
        return SessionState() if stream.startswith("session/") else None

    def evolve(state: object, event: object) -> object:
        if isinstance(state, SessionState):
            return session_evolve(state, event)
        return state

    return initial, evolve


async def cmd_check(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio check``: verify the log (file integrity, every event decodes and folds).

    Exit code 1 when anything is wrong, including a file that does not open as a log.
    """
    import actors  # noqa: F401  # registers the session and board events

    initial, evolve = _session_fold()
    try:
        async with open_log(ctx) as store:
            report = await check_store(store, initial=initial, evolve=evolve, prefix=args.prefix)
    except StoreError as exc:  # damaged beyond opening: that is the finding
        problem = CheckProblem(stream=None, version=None, code=exc.code, message=str(exc))
        report = CheckReport(streams=0, events=0, problems=(problem,))
    if ctx.json:
        ctx.emit(
            {
                "ok": report.ok,
                "db": str(ctx.db),
                "streams": report.streams,
                "events": report.events,
                "problems": [
                    {
                        "stream": p.stream,
                        "version": p.version,
                        "code": p.code,
                        "kind": p.kind,
                        "message": p.message,
                    }
                    for p in report.problems
                ],
                "notes": list(report.notes),
            }
        )
        return 0 if report.ok else 1
    from rich.markup import escape

    for note in report.notes:
        ctx.out.print(f"[yellow]note:[/] {escape(note)}")
    if report.ok:
        ctx.out.print(
            f"[green]✔[/] {ctx.db}: {plural(report.streams, 'stream')}, "
            f"{plural(report.events, 'event')}, "
            "all verified, all decode and fold"
        )
        return 0
    from rich.table import Table

    table = Table(title=f"✖ {ctx.db}: {len(report.problems)} problem(s)", title_justify="left")
    for column in ("stream", "version", "code", "kind", "problem"):
        table.add_column(column, overflow="fold")
    for p in report.problems:
        table.add_row(
            p.stream or "(file)",
            "" if p.version is None else str(p.version),
            p.code,
            p.kind,
            escape(p.message),
        )
    ctx.out.print(table)
    return 1


# -- export / import -----------------------------------------------------------------------


@contextlib.contextmanager
def _written_whole(path: str) -> Iterator[str]:
    """A place to write ``path`` so that a failure leaves nothing behind.

    A regular file is written beside itself under a hidden name and renamed over ``path``
    when complete; a device or a pipe (``/dev/stdout``) is written in place.

    Raises:
        OutputFileError: the folder is missing, or writing failed (a full disk, no
            permission); the partial file is removed.
    """
    target = Path(path)
    if target.exists() and not target.is_file():
        try:
            yield path
        except OSError as exc:
            raise OutputFileError(path, exc.strerror or str(exc)) from None
        return
    if not target.parent.is_dir():
        raise OutputFileError(path, f"its folder {str(target.parent)!r} does not exist")
    partial = target.with_name(f".{target.name}.partial")
    try:
        yield str(partial)
        os.replace(partial, target)
    except OSError as exc:
        raise OutputFileError(path, exc.strerror or str(exc)) from None
    finally:
        partial.unlink(missing_ok=True)


async def _stream_named(store: LogStore, given: str) -> str:
    """The stream ``given`` names: a stream's full name, or a session's id or id prefix."""
    if await store.stream_version(given):
        return given
    return SESSION_PREFIX + await resolve_session(store, given)


async def cmd_export(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio export FILE [--stream NAME]``: the log (or one stream) as JSON Lines.

    ``--stream`` takes a stream's name or a session's id (or a unique prefix of it), as the
    other commands do. A failed export leaves no file behind.
    """
    async with open_log(ctx) as store:
        stream = None if args.stream is None else await _stream_named(store, args.stream)
        with _written_whole(args.file) as destination:
            result = await export_jsonl(store, destination, stream=stream)
    if ctx.json:
        ctx.emit({"file": args.file, "streams": result.streams, "events": result.events})
    else:
        counted = f"{plural(result.events, 'event')} of {plural(result.streams, 'stream')}"
        ctx.out.print(f"exported {counted} to {args.file}")
    return 0


async def cmd_import(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio import FILE``: append an export to the log (all or nothing per check)."""
    if not await trio.Path(args.file).exists():  # before the lock: a typo leaves nothing
        raise InputFileNotFoundError(args.file)
    with db_lock(ctx, "import"):
        async with open_log(ctx, create=True) as store:
            result = await import_jsonl(store, args.file)
    if ctx.json:
        ctx.emit(
            {
                "file": args.file,
                "streams": result.streams,
                "events": result.events,
                "skipped": result.skipped,
            }
        )
    else:
        already = f" ({result.skipped:,} already there, skipped)" if result.skipped else ""
        counted = f"{plural(result.events, 'event')} of {plural(result.streams, 'stream')}"
        ctx.out.print(f"imported {counted} into {ctx.db}{already}")
    return 0


# -- bench ---------------------------------------------------------------------------------


def cmd_bench(ctx: CliContext, args: argparse.Namespace) -> int:
    """``powertrio bench``: every benchmark suite (or ``--suite``), a table or one JSON object.

    A suite that cannot run here for want of an optional tool (``peers`` without
    power-loop, ``instructions`` without valgrind) is listed as skipped, with its reason,
    unless it was named with ``--suite``.

    Synchronous: each suite runs its own ``trio.run``.
    """
    from actors.bench import SUITES

    chosen = args.suite or sorted(SUITES)
    unknown = [s for s in chosen if s not in SUITES]
    if unknown:
        msg = f"unknown suite {unknown[0]!r}; choose from {', '.join(sorted(SUITES))}"
        raise ConfigError(msg)
    results: dict[str, dict[str, float | int | str]] = {}
    failed = False
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    suite_args = argparse.Namespace(quick=args.quick, json=ctx.json)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=ctx.err,
        transient=True,
        disable=ctx.json,
    ) as progress:
        task = progress.add_task("benchmarks", total=len(chosen))
        for name in chosen:
            progress.update(task, description=f"bench {name}")
            module = importlib.import_module(SUITES[name])
            try:
                results[name] = module.run(suite_args)
            except ConfigError as exc:  # e.g. a suite's optional baseline is not installed
                failed = failed or bool(args.suite)  # a failure only when asked for by name
                key = "error" if args.suite else "skipped"
                results[name] = {key: f"{type(exc).__name__}: {exc}"}
            except (PowertrioError, OSError, RuntimeError, trio.TrioInternalError) as exc:
                failed = True
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            progress.advance(task)
    if ctx.json:
        ctx.emit(results)
        return 1 if failed else 0
    from rich.table import Table

    table = Table(
        title="powertrio benchmarks" + (" (quick)" if args.quick else ""), title_justify="left"
    )
    table.add_column("suite")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, figures in results.items():
        for i, (figure, value) in enumerate(figures.items()):
            shown = (
                f"{value:,.3f}"
                if isinstance(value, float)
                else (f"{value:,}" if isinstance(value, int) else str(value))
            )
            table.add_row(name if i == 0 else "", figure, shown, end_section=i == len(figures) - 1)
    ctx.out.print(table)
    return 1 if failed else 0
