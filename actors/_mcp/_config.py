"""How to reach an MCP server (:class:`McpServer`), with its environment kept secret."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, TypeAlias, final

import attrs

from protocols import CrashPolicy
from protocols.errors import ConfigError
from protocols.transports import Secret, redact
from runtime.supervision import Backoff

__all__ = ["McpServer", "McpTransport", "mcp_http", "mcp_stdio"]

McpTransport: TypeAlias = Literal["stdio", "http"]
"""How a server is reached: a subprocess over stdin/stdout, or streamable HTTP."""

_CRASH_POLICIES = ("retry", "abort", "ask")
_DEFAULT_BACKOFF = Backoff(initial=0.05, factor=2.0, maximum=5.0, jitter=0.2)


def _str_tuple(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _optional_names(items: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if items is None else tuple(items)


def _policy_map(policies: Mapping[str, CrashPolicy] | None) -> Mapping[str, CrashPolicy]:
    return dict(policies or {})


def _secret_env(env: Mapping[str, str | Secret] | None) -> Mapping[str, Secret] | None:
    if env is None:
        return None
    return {key: v if isinstance(v, Secret) else Secret(v) for key, v in env.items()}


_SHORTEST_SECRET = 8
"""Environment values shorter than this are not cut out of text: too short to be a token,
and common enough (``1``, ``true``) that cutting them would garble every message."""


@final
@attrs.frozen(kw_only=True, eq=False)
class McpServer:
    """How to reach one MCP server, and how its tools are offered to a model.

    Build one with :func:`mcp_stdio` or :func:`mcp_http`, then turn it into tools with
    :func:`mcp_tools` (or give it to ``spawn_session(tools=[...])``, which does that).
    """

    name: str
    """Identifies the server (its connection actor is ``mcp-<name>``)."""
    transport: McpTransport
    """``stdio`` or ``http``."""
    command: str = ""
    """The executable of a stdio server."""
    args: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    """Its arguments."""
    env: Mapping[str, Secret] | None = attrs.field(default=None, converter=_secret_env)
    """Extra environment variables of a stdio server, each value a :class:`Secret` (tokens
    go here): reprs show them masked, and errors, logs, its stderr and results never quote
    them (values of 8 characters or more: shorter ones are no tokens)."""
    cwd: str | None = None
    """The working directory of a stdio server."""
    url: str = ""
    """The endpoint of an HTTP server (``http://127.0.0.1:8000/mcp``)."""
    prefix: str = ""
    """Put before every tool name (``fs_`` gives ``fs_read``), to keep servers apart."""
    include: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names)
    """Only these server tools (their names on the server); ``None``: all of them."""
    crash_policy: CrashPolicy = "abort"
    """What recovery does with a call that never finished (default for every tool)."""
    crash_policies: Mapping[str, CrashPolicy] = attrs.field(factory=dict, converter=_policy_map)
    """Per-tool crash policies, by the tool's name on the server."""
    timeout: float | None = None
    """Seconds before a call ends with a ``timeout`` outcome; ``None``: no limit."""
    connect_timeout: float = 30.0
    """Seconds a call waits for the connection (a server restarting) before failing."""
    backoff: Backoff = _DEFAULT_BACKOFF
    """Delays between reconnection attempts."""
    max_restarts: int = 5
    """Restarts tolerated within ``restart_window``; past it the connection stops
    restarting the server on its own, and the next call tries once more."""
    restart_window: float = 60.0
    """Seconds over which restarts are counted."""

    def __attrs_post_init__(self) -> None:
        problems = _server_problems(self)
        if problems:
            raise ConfigError(f"MCP server {self.name!r}: " + "; ".join(problems))

    def policy_for(self, tool_name: str) -> CrashPolicy:
        """The crash policy of the server tool ``tool_name``."""
        return self.crash_policies.get(tool_name, self.crash_policy)

    def masked(self, text: str) -> str:
        """``text`` with every value of the server's environment cut out (``***``)."""
        if not self.env:
            return text
        values = {secret.reveal() for secret in self.env.values()}
        # Longest first: a value that contains a shorter one is cut whole.
        secrets = sorted((v for v in values if len(v) >= _SHORTEST_SECRET), key=len, reverse=True)
        return redact(text, tuple(secrets))


def _server_problems(server: McpServer) -> list[str]:
    problems: list[str] = []
    if not server.name or not all(c.isalnum() or c in "_-." for c in server.name):
        problems.append("name must be non-empty letters, digits, '_', '-' or '.'")
    if server.transport == "stdio" and not server.command:
        problems.append("a stdio server needs a command")
    elif server.transport == "http" and not server.url.startswith(("http://", "https://")):
        problems.append(f"an http server needs an http(s) url, got {server.url!r}")
    elif server.transport not in ("stdio", "http"):
        problems.append(f"transport must be 'stdio' or 'http', got {server.transport!r}")
    for policy in (server.crash_policy, *server.crash_policies.values()):
        if policy not in _CRASH_POLICIES:
            problems.append(f"crash policy must be 'retry', 'abort' or 'ask', got {policy!r}")
    if server.timeout is not None and not server.timeout > 0:
        problems.append(f"timeout must be > 0 s, got {server.timeout!r}")
    if not server.connect_timeout > 0:
        problems.append(f"connect_timeout must be > 0 s, got {server.connect_timeout!r}")
    restarts: object = server.max_restarts
    if not isinstance(restarts, int) or isinstance(restarts, bool) or restarts < 0:
        problems.append(f"max_restarts must be an int >= 0, got {restarts!r}")
    if not server.restart_window > 0:
        problems.append(f"restart_window must be > 0 s, got {server.restart_window!r}")
    return problems


def mcp_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    name: str | None = None,
    env: Mapping[str, str | Secret] | None = None,
    cwd: str | None = None,
    prefix: str = "",
    include: Iterable[str] | None = None,
    crash_policy: CrashPolicy = "abort",
    crash_policies: Mapping[str, CrashPolicy] | None = None,
    timeout: float | None = None,
    connect_timeout: float = 30.0,
    backoff: Backoff = _DEFAULT_BACKOFF,
    max_restarts: int = 5,
    restart_window: float = 60.0,
) -> McpServer:
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    Args:
        command (str): the executable (``sys.executable``, ``npx``, ...).
        args (Sequence[str]): its arguments.
        name (str | None): identifies the server; defaults to the last argument's stem,
            else the command's.
        env (Mapping[str, str | Secret] | None): extra environment variables (tokens go
            here); each value is kept as a :class:`~protocols.transports.Secret`.
        cwd (str | None): the working directory.
        prefix (str): put before every tool name.
        include (Iterable[str] | None): offer only these server tools.
        crash_policy (CrashPolicy): the default crash policy of its tools (``abort``).
        crash_policies (Mapping[str, CrashPolicy] | None): per-tool crash policies.
        timeout (float | None): seconds per call.
        connect_timeout (float): seconds a call waits for a (re)connection.
        backoff (Backoff): delays between restarts of the server.
        max_restarts (int): restarts tolerated within ``restart_window`` seconds before
            the server is restarted only when a call needs it.
        restart_window (float): seconds over which restarts are counted.

    Raises:
        ConfigError: an option is invalid (the message names it).
    """
    return McpServer(
        name=name or _default_name(command, args),
        transport="stdio",
        command=command,
        args=tuple(args),
        env=None if env is None else dict(env),
        cwd=cwd,
        prefix=prefix,
        include=include,
        crash_policy=crash_policy,
        crash_policies=crash_policies,
        timeout=timeout,
        connect_timeout=connect_timeout,
        backoff=backoff,
        max_restarts=max_restarts,
        restart_window=restart_window,
    )


def mcp_http(
    url: str,
    *,
    name: str | None = None,
    prefix: str = "",
    include: Iterable[str] | None = None,
    crash_policy: CrashPolicy = "abort",
    crash_policies: Mapping[str, CrashPolicy] | None = None,
    timeout: float | None = None,
    connect_timeout: float = 30.0,
    backoff: Backoff = _DEFAULT_BACKOFF,
    max_restarts: int = 5,
    restart_window: float = 60.0,
) -> McpServer:
    """An MCP server reached over streamable HTTP at ``url``.

    Args:
        url (str): the endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        name (str | None): identifies the server; defaults to the host and port.
        prefix, include, crash_policy, crash_policies, timeout, connect_timeout, backoff,
            max_restarts, restart_window: as for :func:`mcp_stdio`.

    Raises:
        ConfigError: an option is invalid (the message names it).
    """
    host = url.split("://", 1)[-1].split("/", 1)[0]
    return McpServer(
        name=name or host.replace(":", "-") or "http",
        transport="http",
        url=url,
        prefix=prefix,
        include=include,
        crash_policy=crash_policy,
        crash_policies=crash_policies,
        timeout=timeout,
        connect_timeout=connect_timeout,
        backoff=backoff,
        max_restarts=max_restarts,
        restart_window=restart_window,
    )


def _default_name(command: str, args: Sequence[str]) -> str:
    last = args[-1] if args else command
    stem = last.replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0]
    cleaned = "".join(c if c.isalnum() or c in "_-" else "-" for c in stem)
    return cleaned or "stdio"
