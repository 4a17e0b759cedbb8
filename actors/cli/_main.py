"""The ``powertrio`` command line: run agents, watch their trees, read and keep the log.

Every command takes ``--db PATH`` (default ``./powertrio.sqlite``, or ``POWERTRIO_DB``; a
``postgresql://`` URI names a PostgreSQL database instead of a file),
``--json`` (one JSON document on stdout, or JSON Lines for ``log``), ``--debug`` (or its
alias ``--verbose``: tracebacks, and the library's log on stderr) and ``--log-file PATH``
(the library's log and an error's traceback, appended to a file). Exit codes: 0 ok; 1 a
run ended other than ``completed``, ``check`` found problems, or an error; 2 bad usage or
configuration. An error prints its message and its stable code
(``error [store.corrupt]: ...``), never a traceback unless ``--debug``.

The commands live in private modules loaded only when used, so ``--help`` stays quick:
``_run`` (run, send, reply, cancel; the model and tools in ``_model``), ``_inspect``
(sessions, show, tree, log, timers), ``_replay`` (replay, fork), ``_ops`` (check, export,
import, bench), ``_ui`` (ui: the web console), ``_fleet`` (serve, fleet).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, TypeAlias

import trio

from protocols.errors import ConfigError, MissingExtraError, PowertrioError

from ._argtypes import port
from ._logs import CliLogs

if TYPE_CHECKING:
    from ._common import CliContext

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

AsyncCommand: TypeAlias = "Callable[[CliContext, argparse.Namespace], Awaitable[int]]"
SyncCommand: TypeAlias = "Callable[[CliContext, argparse.Namespace], int]"

# command -> (module, function, asynchronous)
_COMMANDS: dict[str, tuple[str, str, bool]] = {
    "run": ("._run", "cmd_run", True),
    "send": ("._run", "cmd_send", True),
    "reply": ("._run", "cmd_reply", True),
    "cancel": ("._run", "cmd_cancel", True),
    "signal": ("._workflows", "cmd_signal", True),
    "sessions": ("._inspect", "cmd_sessions", True),
    "show": ("._inspect", "cmd_show", True),
    "tree": ("._inspect", "cmd_tree", True),
    "log": ("._inspect", "cmd_log", True),
    "timers": ("._inspect", "cmd_timers", True),
    "check": ("._ops", "cmd_check", True),
    "export": ("._ops", "cmd_export", True),
    "import": ("._ops", "cmd_import", True),
    "replay": ("._replay", "cmd_replay", True),
    "fork": ("._replay", "cmd_fork", True),
    "bench": ("._ops", "cmd_bench", False),
    "ui": ("._ui", "cmd_ui", True),
    "serve": ("._fleet", "cmd_serve", True),
    "fleet": ("._fleet", "cmd_fleet", True),
}


def _common() -> argparse.ArgumentParser:
    """The options every command accepts, before or after its name."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's copy must not reset a value given before the command name.
    common.add_argument(
        "--db",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="the event log: a SQLite file, or a postgresql:// URI "
        "(default: ./powertrio.sqlite, or $POWERTRIO_DB)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON for machines instead of tables for people",
    )
    common.add_argument(
        "--debug",
        "--verbose",
        dest="debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an error, and the library's log on stderr",
    )
    common.add_argument(
        "--log-file",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="append the library's log, and the traceback of an error, to PATH",
    )
    return common


_SESSION_HELP = "a session id, or a unique prefix of it"
_TARGET_HELP = "a session or workflow id, or a unique prefix of it"


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--offline",
        action="store_true",
        help="no provider: a local llama.cpp model if installed, else the scripted demo model",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="use the scripted demo model (offline, deterministic)",
    )
    parser.add_argument(
        "--max-tokens",
        type=_positive,
        default=None,
        metavar="N",
        help="the most tokens per model answer (default: the provider's; 1024 offline)",
    )


def build_parser() -> argparse.ArgumentParser:  # noqa: PLR0915
    """The argument parser of ``powertrio`` (every command and option)."""
    common = _common()
    parser = argparse.ArgumentParser(
        prog="powertrio",
        description="An actor runtime for LLM agents on Trio: run agent trees, watch them, "
        "and read, check and replay their event log.",
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help: str, more: str = "") -> argparse.ArgumentParser:
        described = f"{help}. {more}" if more else help
        return commands.add_parser(name, help=help, description=described, parents=[common])

    run = add(
        "run",
        "start an agent on a task; stream its text and show its live tree",
        "Default tools: spawn_agent (a 'helper' sub-agent), schedule_wakeup, current_time, "
        "the board tools (board 'main'), and ask_human at a terminal. Ctrl-C once: cancel "
        "after the current turn; twice: stop now. Exit code 0 only if the run completed.",
    )
    run.add_argument("task", help="what the agent should do")
    run.add_argument(
        "--max-rounds",
        type=_positive,
        default=None,
        metavar="N",
        help="LLM calls the run may make (default 10)",
    )
    _model_options(run)

    add("sessions", "list sessions (status, age, usage, parent) and workflows").add_argument(
        "--roots", action="store_true", help="only top-level sessions (no sub-agents)"
    )
    add("show", "a session's transcript, or a workflow's steps").add_argument(
        "session", metavar="ID", help=_TARGET_HELP
    )
    add("tree", "a session's agent tree, or a workflow's agent steps").add_argument(
        "session", metavar="ID", help=_TARGET_HELP
    )

    log = add("log", "a session's, a workflow's or any stream's events (JSON Lines with --json)")
    log.add_argument(
        "session",
        metavar="ID",
        help=f"{_TARGET_HELP}, or a stream's full name (fleet/agent/NAME, board/NAME, fleet)",
    )
    log.add_argument("--tree", action="store_true", help="with its sub-agents' events")
    log.add_argument(
        "--follow", "-f", action="store_true", help="wait for new events (Ctrl-C ends)"
    )

    send = add("send", "send a follow-up to a session and wait for the run")
    send.add_argument("session", metavar="ID", help=_SESSION_HELP)
    send.add_argument("text", help="the follow-up, as the user's next message")
    send.add_argument(
        "--id",
        default=None,
        metavar="X",
        help="send it as run X, exactly once: run again with the same X after a crash and "
        "it waits for (or shows) that run instead of starting a second",
    )
    _model_options(send)

    cancel = add("cancel", "cancel the open run of a session no process is driving")
    cancel.add_argument("session", metavar="ID", help=_SESSION_HELP)
    cancel.add_argument("--reason", default="", help="recorded in the log")

    reply = add("reply", "answer a run waiting for a human (y/n for approvals)")
    reply.add_argument("session", metavar="ID", help=_SESSION_HELP)
    reply.add_argument(
        "request", metavar="REQUEST", help="the request's id, as `powertrio show ID` lists it"
    )
    reply.add_argument("answer", help="the answer; for an approval: yes approves, else denies")
    _model_options(reply)

    signal = add(
        "signal",
        "send a workflow a signal (its wait_for(NAME) gets PAYLOAD)",
        "The signal is recorded in the workflow's log; the workflow reads it when it next "
        "runs. PAYLOAD is JSON (default null).",
    )
    signal.add_argument("workflow", metavar="ID", help="a workflow id, a prefix, or workflow/ID")
    signal.add_argument("name", metavar="NAME", help="the signal's name, as wait_for(NAME) has it")
    signal.add_argument(
        "payload", metavar="PAYLOAD", nargs="?", default=None, help="JSON (default null)"
    )

    add("timers", "pending durable timers, by due time")

    replay = add(
        "replay", "re-run a session tree's decisions from its log (no model) and check them"
    )
    replay.add_argument("session", metavar="ID", help=_SESSION_HELP)
    replay.add_argument(
        "--from",
        dest="from_version",
        type=int,
        default=0,
        metavar="N",
        help="take the log up to version N as recorded; check only what came after it",
    )

    fork = add("fork", "branch a new session off a session's log at a version")
    fork.add_argument("session", metavar="ID", help=_SESSION_HELP)
    fork.add_argument(
        "--at", type=_positive, required=True, metavar="N", help="the last event version to keep"
    )
    fork.add_argument("--as", dest="new_id", default=None, metavar="NEW", help="the fork's id")

    check = add("check", "verify the log: file integrity, every event decodes and folds")
    check.add_argument("--prefix", default="", help="only streams starting with this")

    export = add("export", "write the log (or one stream) as JSON Lines")
    export.add_argument("file", help="the JSON Lines file to write (replaced whole)")
    export.add_argument(
        "--stream",
        default=None,
        metavar="ID",
        help="only this stream: a session id (or a unique prefix of it), or a stream name",
    )

    add("import", "append a JSON Lines export to the log").add_argument(
        "file", help="a file `powertrio export` wrote"
    )

    bench = add("bench", "run the benchmark suites")
    bench.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help="only this suite (repeatable): one of the names python -m actors.bench takes",
    )
    bench.add_argument("--quick", action="store_true", help="small workloads (a smoke test)")

    _ui_options(add)
    from ._fleet_args import add_fleet_commands  # noqa: PLC0415  # argparse only, no agents

    add_fleet_commands(add, common)
    return parser


def _ui_options(add: Callable[..., argparse.ArgumentParser]) -> None:
    """The ``ui`` command and its options."""
    ui = add(
        "ui",
        "serve the web console over the log (live trees, log, replay, human requests)",
        "Needs the console extra (pip install 'powertrio[console]'). Listens on 127.0.0.1; "
        "any other address needs --token or POWERTRIO_UI_TOKEN. Its forms resume sessions "
        "with the model the model options choose, as send and reply do.",
    )
    ui.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    ui.add_argument(
        "--port", type=port, default=8321, metavar="N", help="the port (0: any free one)"
    )
    ui.add_argument(
        "--token",
        default=None,
        metavar="T",
        help="a bearer token every request must carry (or $POWERTRIO_UI_TOKEN)",
    )
    ui.add_argument(
        "--price",
        action="append",
        metavar="MODEL=IN,OUT",
        help="a model's price in USD per million prompt and completion tokens (repeatable)",
    )
    _model_options(ui)


def _positive(text: str) -> int:
    # argparse names the type function in its message when it raises ValueError, and the
    # user should read what was wrong, not a private name: raise ArgumentTypeError only.
    try:
        value = int(text)
    except ValueError:
        msg = f"must be a whole number, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if value < 1:
        msg = f"must be at least 1, got {value}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _essential(error: BaseException) -> BaseException:
    """The one error that matters in what Trio raised (groups hold cancellations too)."""
    leaves = [e for e in _leaves(error) if not isinstance(e, trio.Cancelled)]
    for kind in (KeyboardInterrupt, BrokenPipeError, SystemExit, PowertrioError):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return leaves[0] if leaves else error


_EXTRAS: dict[str, str] = {
    "rich": "cli",
    "starlette": "console",
    "hypercorn": "console",
    "jinja2": "console",
    "markupsafe": "console",
    "psycopg": "postgres",
    "xllamacpp": "local",
    "opentelemetry": "otel",
    "prometheus_client": "otel",
    "mcp": "mcp",
    "pydantic": "pydantic",
}
"""The optional extra (``pyproject.toml``) that installs each third-party module a command
may import."""


def _missing_extra(command: str, error: BaseException) -> BaseException:
    """``error``, or the typed error naming the extra to install when it is the import of
    an optional extra's module that failed."""
    if not isinstance(error, ModuleNotFoundError) or not error.name:
        return error
    module = error.name.partition(".")[0]
    extra = _EXTRAS.get(module)
    if extra is None:
        return error
    typed = MissingExtraError(f"powertrio {command}", extra, module)
    typed.__cause__ = error
    return typed


def _report(ctx: CliContext | None, error: BaseException, *, debug: bool, json: bool) -> int:
    """Print ``error`` for people (or as JSON) and return the exit code."""
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, SystemExit):  # rich exits so when stdout is a closed pipe
        return error.code if isinstance(error.code, int) else EXIT_FAILED
    if isinstance(error, BrokenPipeError):  # `powertrio log ID | head`: the reader is done
        _silence_stdout()
        return EXIT_OK
    if isinstance(error, PowertrioError):
        code, message = error.code, str(error)
        exit_code = EXIT_USAGE if isinstance(error, ConfigError) else EXIT_FAILED
    else:
        code = "internal"
        message = f"{type(error).__name__}: {error}"
        if not debug:
            message += " (a bug in powertrio: run again with --debug for the traceback)"
        exit_code = EXIT_FAILED
    if debug:
        traceback.print_exception(error)
    if json:
        import orjson  # noqa: PLC0415

        document = {"error": {"code": code, "message": message}}
        sys.stdout.write(orjson.dumps(document).decode() + "\n")
    elif ctx is not None:
        from rich.markup import escape  # noqa: PLC0415

        ctx.err.print(f"[bold red]error[/] [red]\\[{code}][/]: {escape(message)}")
    else:
        sys.stderr.write(f"error [{code}]: {message}\n")
    return exit_code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit raises no second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``powertrio`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:  # argparse: --help (0) or bad usage (2), already printed
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    debug = bool(getattr(args, "debug", False))
    json = bool(getattr(args, "json", False))
    ctx: CliContext | None = None
    logs: CliLogs | None = None
    try:
        logs = CliLogs.open(debug=debug, log_file=getattr(args, "log_file", None))
        from ._common import CliContext  # noqa: PLC0415  # loads rich

        ctx = CliContext.create(db=getattr(args, "db", None), json=json, debug=debug)
        module_name, function_name, asynchronous = _COMMANDS[args.command]
        function = getattr(importlib.import_module(module_name, __package__), function_name)
        if asynchronous:
            command: AsyncCommand = function
            return trio.run(command, ctx, args)
        sync_command: SyncCommand = function
        return sync_command(ctx, args)
    except BaseException as raised:  # the one place errors become exit codes
        if isinstance(raised, SystemExit):
            raise
        error = _missing_extra(args.command, _essential(raised))
        if logs is not None:
            logs.failed(args.command, error)
        return _report(ctx, error, debug=debug, json=json)
    finally:
        if logs is not None:
            logs.close()


if __name__ == "__main__":
    raise SystemExit(main())
