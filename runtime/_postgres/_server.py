"""A throwaway PostgreSQL server on a loopback port, for tests and benchmarks.

``running_postgres()`` finds ``initdb``/``pg_ctl`` (Debian's versioned folders or
``PATH``), creates a cluster in a temporary folder, starts it on a free loopback port
with its socket in that folder, creates a database and stops and removes everything on
exit. PostgreSQL refuses to run as root, so as root the cluster belongs to the
``postgres`` user and the tools run as that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import final

import attrs

__all__ = ["PostgresServer", "find_postgres_bin", "postgres_missing", "running_postgres"]

_TOOLS = ("initdb", "pg_ctl")


@final
@attrs.frozen(kw_only=True)
class PostgresServer:
    """A running throwaway server (see :func:`running_postgres`)."""

    host: str
    """The loopback address it listens on."""
    port: int
    """Its TCP port."""
    database: str
    """The database created for the caller."""
    user: str
    """The superuser to connect as (no password: loopback ``trust``)."""
    _pg_ctl: Callable[..., None] | None = attrs.field(
        default=None, alias="pg_ctl", eq=False, repr=False
    )

    def stop(self) -> None:
        """Stop the server, as an operator's restart does (fault tests).

        A *fast* shutdown: open connections are dropped and transactions in flight
        roll back, while everything committed is kept. :meth:`start` brings it back.

        Raises:
            RuntimeError: this server was not started by :func:`running_postgres`, or
                ``pg_ctl`` failed.
        """
        self._control("stop", "-m", "fast")

    def start(self) -> None:
        """Start the server again after :meth:`stop`, on the same port and data.

        Raises:
            RuntimeError: as :meth:`stop`.
        """
        self._control("start")

    def _control(self, *argv: str) -> None:
        if self._pg_ctl is None:
            raise RuntimeError("only a server from running_postgres() can be stopped and started")
        self._pg_ctl(*argv)

    def dsn(self, database: str | None = None) -> str:
        """A libpq connection string for ``database`` (default: the created one)."""
        name = self.database if database is None else database
        return f"host={self.host} port={self.port} dbname={name} user={self.user}"


def find_postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: the newest Debian one, or ``PATH``'s."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: [int(p) if p.isdigit() else 0 for p in Path(path).parent.name.split(".")],
        reverse=True,
    )
    for folder in candidates:
        if all(os.access(Path(folder) / tool, os.X_OK) for tool in _TOOLS):
            return Path(folder)
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).parent
    return None


def postgres_missing() -> str | None:
    """Why :func:`running_postgres` cannot work here, or ``None`` if it can."""
    if find_postgres_bin() is None:
        return "PostgreSQL's initdb/pg_ctl are not installed (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no 'postgres' user to run the server as"
    try:
        import psycopg  # noqa: F401, PLC0415  # only probing whether the extra is installed
    except ImportError:
        return "psycopg is not installed (pip install 'powertrio[postgres]')"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def running_postgres(
    *, durable: bool = False, database: str = "powertrio"
) -> Iterator[PostgresServer]:
    """Run a new PostgreSQL cluster for the length of the block.

    Args:
        durable (bool): keep PostgreSQL's crash-safe defaults (``fsync``, synchronous
            commit), as benchmarks need; the default turns them off, as tests want.
        database (str): the database to create.

    Yields:
        PostgresServer: where to connect.

    Raises:
        RuntimeError: PostgreSQL is not installed, or the server would not start
            (the message carries its log).
    """
    missing = postgres_missing()
    if missing is not None:
        raise RuntimeError(missing)
    bin_dir = find_postgres_bin()
    assert bin_dir is not None
    as_root = os.geteuid() == 0
    owner = pwd.getpwnam("postgres") if as_root else pwd.getpwuid(os.geteuid())
    base = Path(tempfile.mkdtemp(prefix="powertrio-pg-"))
    data = base / "data"
    log = base / "server.log"

    def run(*argv: str) -> None:
        command = [str(bin_dir / argv[0]), *argv[1:]]
        if as_root:
            command = ["runuser", "-u", owner.pw_name, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            msg = f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()}\n{tail}"
            raise RuntimeError(msg)

    started = False
    try:
        if as_root:
            os.chown(base, owner.pw_uid, owner.pw_gid)
        run("initdb", "-D", str(data), "-U", owner.pw_name, "-A", "trust", "-E", "UTF8",
            "--no-locale", "--no-sync")  # fmt: skip
        port = _free_port()
        settings = [
            f"-c port={port}",
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={base}",
            "-c max_connections=200",
            "-c shared_buffers=64MB",
        ]
        if not durable:
            settings += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]

        def pg_ctl(action: str, *more: str) -> None:
            run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60",
                "-o", " ".join(settings), action, *more)  # fmt: skip

        pg_ctl("start")
        started = True
        server = PostgresServer(
            host="127.0.0.1", port=port, database=database, user=owner.pw_name, pg_ctl=pg_ctl
        )
        _create_database(server, database)
        yield server
    finally:
        if started:
            with contextlib.suppress(RuntimeError):
                run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


def _create_database(server: PostgresServer, database: str) -> None:
    """Create ``database`` through the ``postgres`` maintenance database."""
    import psycopg  # noqa: PLC0415  # an optional dependency
    from psycopg import sql  # noqa: PLC0415

    with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
