"""The fleet file: named long-running agents declared in TOML, checked with line numbers.

::

    [agents.digest]
    prompt = "You write the morning digest."
    provider = "demo"                    # demo (offline), openai or anthropic
    model = "gpt-4o-mini"                # optional
    tools = ["mytools:fetch_news"]       # import paths, package.module:function
    input = "Write today's digest."      # what each scheduled run is asked
    max_rounds = 6
    budget = { run_tokens = 4000, day_tokens = 40000 }

    [[agents.digest.schedules]]
    cron = "0 7 * * 1-5"                 # UTC; or: every = "15m" (s, m, h, d, or seconds)

A file is checked whole: every problem is reported at once with its line
(:class:`~actors.fleet.FleetFileError`). ``tomllib`` gives no positions for values,
so :class:`_Lines` finds the line of each table and key by reading the text itself (the
fleet file's shapes: tables, arrays of tables, ``key = value`` and dotted keys).
"""

from __future__ import annotations

import hashlib
import importlib
import re
import tomllib
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any, Literal, final

import attrs
import orjson

from protocols import transports
from protocols.errors import ConfigError

from .._session._agents import AgentSpec
from .._session._budget import Budget
from .._tools._tool import Tool, tool
from ._cron import CronSchedule
from ._errors import CronSyntaxError, FleetFileError

__all__ = [
    "PROVIDERS",
    "AgentDecl",
    "FleetFile",
    "ScheduleDecl",
    "code_version",
    "load_tool",
    "parse_fleet_file",
]

PROVIDERS = ("demo", *transports.PROVIDERS)
"""The provider names a fleet file may give: the scripted offline model, or a provider
configured from the environment as for ``powertrio run``."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}\Z")
_TOOL_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)\Z")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_AGENT_KEYS = frozenset(
    {"prompt", "provider", "model", "tools", "input", "max_rounds", "budget", "schedules"}
)
_BUDGET_KEYS = frozenset({"run_tokens", "day_tokens"})
_SCHEDULE_KEYS = frozenset({"cron", "every", "input"})


def _package_version() -> str:
    try:
        return package_version("powertrio")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return "0+unknown"


@final
@attrs.frozen(kw_only=True)
class ScheduleDecl:
    """One schedule of an agent: a cron expression or a fixed interval."""

    kind: Literal["cron", "every"]
    expression: str
    """The cron expression, or the interval as written (``15m``)."""
    seconds: float | None = None
    """The interval in seconds (``every`` only)."""
    input: str | None = None
    """What the runs it starts are asked; ``None``: the agent's ``input``."""

    @property
    def key(self) -> str:
        """Names the schedule in timer ids and notes; it changes when the schedule does."""
        return f"{self.kind}={self.expression}"


@final
@attrs.frozen(kw_only=True)
class AgentDecl:
    """One agent of a fleet file, checked; plain data, so it is stored in the log as JSON."""

    name: str
    prompt: str
    provider: str = "demo"
    model: str | None = None
    tools: tuple[str, ...] = ()
    """Import paths, ``package.module:function``."""
    input: str = "Scheduled run."
    max_rounds: int = 10
    run_tokens: int | None = None
    day_tokens: int | None = None
    schedules: tuple[ScheduleDecl, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The declaration as JSON (what the log records)."""
        data: dict[str, Any] = attrs.asdict(self)
        data["tools"] = list(self.tools)
        data["schedules"] = [attrs.asdict(s) for s in self.schedules]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentDecl:
        """The declaration :meth:`to_json` wrote."""
        fields = dict(data)
        fields["tools"] = tuple(fields.get("tools", ()))
        fields["schedules"] = tuple(ScheduleDecl(**s) for s in fields.get("schedules", ()))
        return cls(**fields)

    def load_tools(self) -> tuple[Tool[..., object], ...]:
        """Import the tools (raises what :func:`load_tool` raises)."""
        return tuple(load_tool(path) for path in self.tools)

    def spec(self, tools: Sequence[Tool[..., object]] | None = None) -> AgentSpec:
        """The :class:`AgentSpec` each run of the agent uses."""
        budget = Budget(max_tokens=self.run_tokens) if self.run_tokens is not None else None
        return AgentSpec(
            name=self.name,
            system_prompt=self.prompt,
            tools=self.load_tools() if tools is None else tools,
            model=self.model,
            max_rounds=self.max_rounds,
            budget=budget,
        )

    def spec_hash(self, tools: Sequence[Tool[..., object]] | None = None) -> str:
        """A hash of what the model sees and may do: the declaration (schedules aside) and
        each tool's name, description and parameter schema."""
        loaded = self.load_tools() if tools is None else tools
        data = self.to_json()
        data.pop("schedules")
        data["tool_schemas"] = [
            {"name": t.name, "description": t.spec.description, "parameters": t.spec.parameters}
            for t in loaded
        ]
        canonical = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()[:16]


def code_version(spec_hash: str) -> str:
    """The code version a run records: the package version and the spec hash."""
    return f"powertrio {_package_version()} spec {spec_hash}"


def load_tool(path: str) -> Tool[..., object]:
    """The tool at ``package.module:function``: a ``Tool`` as it is, a function wrapped
    with :func:`~actors.tool`.

    Raises:
        ConfigError: the path is malformed, the module does not import, it has no such
            name, or the name is neither a tool nor a function.
    """
    if not _TOOL_PATH.match(path):
        msg = f"tool {path!r} is not an import path like 'package.module:function'"
        raise ConfigError(msg)
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"tool {path!r}: module {module_name!r} does not import ({exc})"
        raise ConfigError(msg) from exc
    found = getattr(module, attribute, None)
    if found is None:
        msg = f"tool {path!r}: module {module_name!r} has no {attribute!r}"
        raise ConfigError(msg)
    if isinstance(found, Tool):
        return found
    if callable(found):
        try:
            return tool(found)
        except (TypeError, ValueError) as exc:  # ToolDefinitionError: no schema for it
            msg = f"tool {path!r} cannot be a tool: {exc}"
            raise ConfigError(msg) from exc
    msg = f"tool {path!r} is a {type(found).__name__}, not a tool or a function"
    raise ConfigError(msg)


@final
@attrs.frozen
class FleetFile:
    """A checked fleet file: its agents by name, in file order."""

    agents: tuple[AgentDecl, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.agents)


# -- where things are in the text ---------------------------------------------------------

_HEADER = re.compile(r"\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?\Z")
_KEY = re.compile(r"\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")


def _key_path(text: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in text.split("."))


class _Lines:
    """The line of each table and key, by path: ``("agents", "x", "schedules", 0, "cron")``."""

    def __init__(self, text: str) -> None:
        self.at: dict[tuple[object, ...], int] = {}
        arrays: dict[tuple[str, ...], int] = {}
        table: tuple[object, ...] = ()
        for number, line in enumerate(text.splitlines(), start=1):
            header = _HEADER.match(line)
            if header is not None:
                path = _key_path(header.group(2))
                if header.group(1) == "[[":
                    index = arrays.get(path, -1) + 1
                    arrays[path] = index
                    table = (*path, index)
                else:
                    table = path
                self.at.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key is not None and not line.lstrip().startswith("#"):
                self.at.setdefault((*table, *_key_path(key.group(1))), number)

    def line(self, *path: object) -> int:
        """The line of ``path``, else of its nearest enclosing table or key found."""
        while path:
            if path in self.at:
                return self.at[path]
            path = path[:-1]
        return 0


# -- checking --------------------------------------------------------------------------------


def _duration(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if match is not None:
            seconds = float(match.group(1)) * _UNITS[match.group(2)]
            return seconds if seconds > 0 else None
    return None


class _Checker:
    def __init__(self, lines: _Lines) -> None:
        self.lines = lines
        self.problems: list[tuple[int, str]] = []

    def problem(self, path: tuple[object, ...], message: str) -> None:
        self.problems.append((self.lines.line(*path), message))

    def agent(self, name: str, table: object) -> AgentDecl | None:
        here: tuple[object, ...] = ("agents", name)
        if not isinstance(table, dict):
            self.problem(here, f"agents.{name} must be a table")
            return None
        if not _NAME.match(name):
            self.problem(
                here,
                f"agent name {name!r}: a letter, then letters, digits, '_' or '-' "
                "(64 characters at most)",
            )
        for key in sorted(set(table) - _AGENT_KEYS):
            self.problem((*here, key), f"agents.{name}: unknown key {key!r}")
        before = len(self.problems)
        prompt = table.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            self.problem((*here, "prompt"), f"agents.{name}: prompt must be a non-empty string")
        provider = table.get("provider", "demo")
        if provider not in PROVIDERS:
            self.problem(
                (*here, "provider"),
                f"agents.{name}: provider {provider!r} is not one of {', '.join(PROVIDERS)}",
            )
        model = table.get("model")
        if model is not None and not isinstance(model, str):
            self.problem((*here, "model"), f"agents.{name}: model must be a string")
        task = table.get("input", "Scheduled run.")
        if not isinstance(task, str) or not task.strip():
            self.problem((*here, "input"), f"agents.{name}: input must be a non-empty string")
        max_rounds = table.get("max_rounds", 10)
        if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
            self.problem((*here, "max_rounds"), f"agents.{name}: max_rounds must be >= 1")
        tools = self.tools(here, name, table.get("tools", []))
        run_tokens, day_tokens = self.budget(here, name, table.get("budget", {}))
        schedules = self.schedules(here, name, table.get("schedules", []))
        if len(self.problems) > before:
            return None
        assert isinstance(prompt, str)
        assert isinstance(task, str)
        assert isinstance(max_rounds, int)
        return AgentDecl(
            name=name,
            prompt=prompt,
            provider=str(provider),
            model=model if isinstance(model, str) else None,
            tools=tools,
            input=task,
            max_rounds=max_rounds,
            run_tokens=run_tokens,
            day_tokens=day_tokens,
            schedules=schedules,
        )

    def tools(self, here: tuple[object, ...], name: str, value: object) -> tuple[str, ...]:
        at = (*here, "tools")
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(at, f"agents.{name}: tools must be a list of import paths")
            return ()
        for path in value:
            try:
                load_tool(path)
            except ConfigError as exc:
                self.problem(at, f"agents.{name}: {exc}")
        return tuple(value)

    def budget(
        self, here: tuple[object, ...], name: str, value: object
    ) -> tuple[int | None, int | None]:
        at = (*here, "budget")
        if not isinstance(value, dict):
            self.problem(at, f"agents.{name}: budget must be a table (run_tokens, day_tokens)")
            return None, None
        for key in sorted(set(value) - _BUDGET_KEYS):
            self.problem((*at, key), f"agents.{name}.budget: unknown key {key!r}")
        limits: list[int | None] = []
        for key in ("run_tokens", "day_tokens"):
            limit = value.get(key)
            if limit is not None and (
                isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
            ):
                self.problem((*at, key), f"agents.{name}.budget: {key} must be a whole number >= 1")
                limit = None
            limits.append(limit)
        return limits[0], limits[1]

    def schedules(
        self, here: tuple[object, ...], name: str, value: object
    ) -> tuple[ScheduleDecl, ...]:
        at = (*here, "schedules")
        if not isinstance(value, list):
            self.problem(at, f"agents.{name}: schedules must be an array of tables")
            return ()
        found: list[ScheduleDecl] = []
        for index, item in enumerate(value):
            where = (*at, index)
            if not isinstance(item, dict):
                self.problem(where, f"agents.{name}.schedules[{index}] must be a table")
                continue
            for key in sorted(set(item) - _SCHEDULE_KEYS):
                self.problem(
                    (*where, key), f"agents.{name}.schedules[{index}]: unknown key {key!r}"
                )
            task = item.get("input")
            if task is not None and not isinstance(task, str):
                self.problem((*where, "input"), f"agents.{name}.schedules[{index}]: bad input")
                task = None
            if ("cron" in item) == ("every" in item):
                self.problem(
                    where, f"agents.{name}.schedules[{index}]: give exactly one of cron or every"
                )
            elif "cron" in item:
                expression = item["cron"]
                try:
                    CronSchedule.parse(str(expression))
                except CronSyntaxError as exc:
                    self.problem((*where, "cron"), f"agents.{name}.schedules[{index}]: {exc}")
                    continue
                found.append(ScheduleDecl(kind="cron", expression=str(expression), input=task))
            else:
                seconds = _duration(item["every"])
                if seconds is None:
                    self.problem(
                        (*where, "every"),
                        f"agents.{name}.schedules[{index}]: every {item['every']!r} must be a "
                        "positive duration: seconds, or a number with s, m, h or d",
                    )
                    continue
                expression = str(item["every"])
                found.append(
                    ScheduleDecl(kind="every", expression=expression, seconds=seconds, input=task)
                )
        keys = [s.key for s in found]
        for key in sorted({k for k in keys if keys.count(k) > 1}):
            self.problem(at, f"agents.{name}: schedule {key} is given twice")
        return tuple(found)


def parse_fleet_file(text: str, path: str = "<fleet>") -> FleetFile:
    """Check a fleet file's text and return its agents.

    Raises:
        FleetFileError: one ``(line, message)`` per problem found (a TOML syntax error is
            one problem: the parser stops there).
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = int(match.group(1)) if match else 0
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise FleetFileError(path, [(line, f"TOML syntax: {message}")]) from None
    checker = _Checker(_Lines(text))
    for key in sorted(set(document) - {"agents"}):
        checker.problem((key,), f"unknown top-level key {key!r} (agents go in [agents.NAME])")
    agents_table = document.get("agents", {})
    agents: list[AgentDecl] = []
    if not isinstance(agents_table, dict) or not agents_table:
        checker.problem(("agents",), "no agents: declare at least one [agents.NAME] table")
    else:
        for name, table in agents_table.items():
            decl = checker.agent(name, table)
            if decl is not None:
                agents.append(decl)
    if checker.problems:
        raise FleetFileError(path, sorted(checker.problems))
    return FleetFile(tuple(agents))
