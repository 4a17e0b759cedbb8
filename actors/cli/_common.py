"""What every ``powertrio`` command shares: output, the log and its lock.

The log is a SQLite file (the default, zero setup) or, when ``--db``/``POWERTRIO_DB`` is a
``postgresql://`` URI, a PostgreSQL database shared by several processes. How sessions are
read from it, and the plain formats they print in, are ``actors._reading``'s (the console
reads them too).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, final

import attrs
import orjson

from protocols.errors import (
    BadConnectionStringError,
    ConfigError,
    MissingExtraError,
    StoreLockedError,
    StoreNotFoundError,
    UnsupportedLogSchemeError,
)
from runtime import open_sqlite_store
from runtime.postgres import open_postgres_store

if TYPE_CHECKING:
    from rich.console import Console

    from .._reading._log import LogStore

__all__ = [
    "DEFAULT_DB",
    "check_folder",
    "CliContext",
    "db_lock",
    "db_holder",
    "db_in_use",
    "open_log",
]

DEFAULT_DB = "powertrio.sqlite"
"""The event log the CLI uses in the current directory (``--db`` or ``POWERTRIO_DB`` to change)."""

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""``--db`` values starting so name a PostgreSQL database, not a file."""

_URI_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
"""What makes a ``--db`` value a URI rather than a path."""

_LOCK_NAME = "powertrio-driver"

_PIPE_WIDTH = 160


@final
@attrs.define(eq=False)
class CliContext:
    """The options every command takes, and the consoles it prints to."""

    db: Path
    """The event log file; with :attr:`dsn` set, the server as ``host:port/database`` (for
    messages: no file)."""
    json: bool
    """Print one JSON document (or JSON Lines, for streams of events) for machines."""
    debug: bool
    """Show tracebacks of errors."""
    out: Console
    """Where results go (stdout)."""
    err: Console
    """Where notes, progress and errors go (stderr), so ``--json`` output stays clean."""
    dsn: str | None = None
    """The PostgreSQL connection string when ``--db`` is a ``postgresql://`` URI."""

    @classmethod
    def create(cls, *, db: str | None, json: bool, debug: bool) -> CliContext:
        """The context from the options (``db`` ``None``: ``$POWERTRIO_DB`` or the default)."""
        from rich.console import Console  # noqa: PLC0415  # rich loads only for the CLI

        value = db or os.environ.get("POWERTRIO_DB") or DEFAULT_DB
        dsn = value if value.startswith(POSTGRES_SCHEMES) else None
        scheme = _URI_SCHEME.match(value)
        if dsn is None and scheme is not None:
            # mysql://x is no file path: taken as one, it would be "no event log at 'mysql:/x'".
            supported = tuple(s.removesuffix("://") for s in POSTGRES_SCHEMES)
            raise UnsupportedLogSchemeError(scheme.group(1), supported)
        path = Path(value) if dsn is None else Path(_server_label(dsn))
        if dsn is None and path.is_dir():
            source = "--db" if db else "POWERTRIO_DB"
            msg = (
                f"{source} names the folder {str(path)!r}; name the log's file, "
                f"e.g. {str(path / DEFAULT_DB)!r}"
            )
            raise ConfigError(msg)
        out = Console(highlight=False)
        if not out.is_terminal and "COLUMNS" not in os.environ:
            # A pipe or a file has no width: do not wrap ids and lines at 80 columns.
            out = Console(highlight=False, width=_PIPE_WIDTH)
        err = Console(stderr=True, highlight=False)
        if not err.is_terminal and "COLUMNS" not in os.environ:
            err = Console(stderr=True, highlight=False, width=_PIPE_WIDTH)
        return cls(db=path, json=json, debug=debug, out=out, err=err, dsn=dsn)

    def emit(self, document: object) -> None:
        """Print ``document`` as one line of JSON on stdout."""
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
        sys.stdout.flush()


def _server_label(dsn: str) -> str:
    """``host:port/database`` of a connection string, never its password.

    Raises:
        MissingExtraError: psycopg (the ``postgres`` extra) is not installed.
        BadConnectionStringError: the string does not parse.
    """
    try:
        from psycopg import ProgrammingError, conninfo  # noqa: PLC0415  # the optional extra
    except ImportError:
        raise MissingExtraError(
            "a PostgreSQL log (--db postgresql://...)", "postgres", "psycopg"
        ) from None
    try:
        info = conninfo.conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        raise BadConnectionStringError(str(exc).strip().splitlines()[0]) from None
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or info.get('user') or ''}"


@asynccontextmanager
async def open_log(ctx: CliContext, *, create: bool = False) -> AsyncIterator[LogStore]:
    """Open the event log named by ``--db``: a SQLite file or a PostgreSQL database.

    Args:
        ctx (CliContext): the options.
        create (bool): create the log when it does not exist (``run``, ``import``); the
            other commands refuse, so a typo in ``--db`` does not leave an empty log behind.

    Raises:
        StoreNotFoundError: there is no log at that path or in that database (and
            ``create`` is false), or the folder to create it in does not exist.
        CorruptLogError, ForeignDatabaseError, StoreSchemaVersionError: as
            :func:`open_sqlite_store` and :func:`open_postgres_store`.
        StoreUnavailableError, StoreRefusedError, BadConnectionStringError: the
            PostgreSQL server cannot be reached, refused us, or ``--db`` does not parse.
    """
    if ctx.dsn is not None:
        async with open_postgres_store(ctx.dsn, create=create) as pg_store:
            yield pg_store
        return
    if not ctx.db.exists():
        if not create:
            hint = 'start one with `powertrio run "task"` here, or point at one with --db PATH'
            raise StoreNotFoundError(str(ctx.db), hint)
        check_folder(ctx.db)
    async with open_sqlite_store(ctx.db) as store:
        yield store


# -- the lock: one process drives the sessions of a log at a time ------------------------


def _lock_path(db: Path) -> Path:
    from actors._fleet._leases import driver_lock_path  # noqa: PLC0415

    return driver_lock_path(db)


def check_folder(db: Path) -> None:
    """Refuse a log path whose folder does not exist, before anything creates a file there.

    Raises:
        StoreNotFoundError: the folder is missing.
    """
    folder = db.parent
    if not folder.is_dir():
        hint = f"its folder {str(folder)!r} does not exist: create it, or pick another --db"
        raise StoreNotFoundError(str(db), hint)


@contextlib.contextmanager
def db_lock(db: Path | CliContext, command: str, *, wait: float = 1.0) -> Iterator[None]:
    """Hold the log's driver lock while this process runs sessions of it.

    Sessions are actors with one writer each (one writer per stream): two processes driving
    the same log would compete for their streams. ``run``, ``send``, ``reply``, ``cancel``
    and ``import`` take this advisory lock (``<db>.lock``); reading commands do not. Given
    the context of a PostgreSQL log, it is an advisory lock on the server instead (see
    ``runtime.lowlevel.postgres_lock``), released by the server if this process dies.

    The lock file stays beside the log after a clean exit, emptied: deleting it would let
    a process that opened it a moment before lock a file no one else can see, and two
    drivers would run at once.

    Raises:
        StoreNotFoundError: the log's folder does not exist.
        StoreLockedError: another process holds the lock (its pid and command are named).
    """
    if isinstance(db, CliContext):
        if db.dsn is not None:
            from runtime.lowlevel import postgres_lock  # noqa: PLC0415

            holder = f"pid {os.getpid()} (`powertrio {command}`)"
            with postgres_lock(db.dsn, _LOCK_NAME, holder=holder, wait=wait):
                yield
            return
        db = db.db
    try:
        import fcntl  # noqa: PLC0415  # POSIX only
    except ImportError:  # pragma: no cover - Windows: no advisory lock
        yield
        return
    check_folder(db)
    path = _lock_path(db)
    handle: IO[str] = path.open("a+", encoding="utf-8")
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "another process"
                    raise StoreLockedError(str(db), holder) from None
                time.sleep(0.05)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} (`powertrio {command}`)")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def db_in_use(db: Path | CliContext) -> bool:
    """Whether a process holds the log's driver lock right now (its runs are live)."""
    if isinstance(db, CliContext):
        if db.dsn is not None:
            from runtime.lowlevel import postgres_lock_held  # noqa: PLC0415

            return postgres_lock_held(db.dsn, _LOCK_NAME)
        db = db.db
    from actors._fleet._leases import driver_lock_held  # noqa: PLC0415

    return driver_lock_held(db)


def db_holder(db: Path) -> str | None:
    """Who holds the SQLite log's driver lock right now, as it wrote itself in the lock
    file (``pid N (`powertrio serve`)``), or ``None`` when no process holds it."""
    from actors._fleet._leases import driver_lock_holder  # noqa: PLC0415

    return driver_lock_holder(db)
