"""Agent specs: what a sub-agent (or a top-level agent) is made of, checked strictly."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias, TypedDict, TypeGuard, cast, final

import attrs

from protocols import LLM, OutputType, ResponseFormat
from protocols.errors import AgentSpecError, ConfigError, UnsupportedTypeError
from protocols.jsonschema import check_schema, schema_problems

from .._tools._tool import Tool, ToolRegistry, tool
from ._budget import Budget
from ._context import ContextPolicy

Lifecycle: TypeAlias = Literal["ephemeral", "linked", "detached"]
"""What happens to a child's stream and actor when it is done.

``ephemeral``: its stream is deleted once it completes (kept when it fails, for the
post-mortem). ``linked`` (default): its stream is kept, and it is a child of its parent's
actor, so stopping the parent stops it. ``detached``: it runs under the runtime's root,
independent of its parent's life.
"""

FormatArg: TypeAlias = ResponseFormat | type[Any] | None
"""What ``response_format=`` takes: a JSON Schema (:class:`~protocols.ResponseFormat`), an
attrs class or a pydantic model (the answer comes back as an instance), or ``None``."""


def resolve_format(value: FormatArg) -> tuple[ResponseFormat | None, OutputType[Any] | None]:
    """The response format to record and ask for, and the class to structure the answer
    into (``None`` for a plain JSON Schema).

    Raises:
        UnsupportedTypeError: ``value`` is a class with no JSON Schema form.
    """
    if value is None or isinstance(value, ResponseFormat):
        return value, None
    typed = _output_type(value)
    return typed.format, typed


def _output_type(cls: type[Any]) -> OutputType[Any]:
    """One schema per class per process (a class lives as long as its schema)."""
    typed = _OUTPUT_TYPES.get(cls)
    if typed is None:
        typed = _OUTPUT_TYPES[cls] = OutputType.of(cls)
    return typed


_OUTPUT_TYPES: dict[type[Any], OutputType[Any]] = {}


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_LIFECYCLES = ("ephemeral", "linked", "detached")


def _tool_tuple(
    tools: Iterable[str | Tool[..., object]] | None,
) -> tuple[str | Tool[..., object], ...] | None:
    return None if tools is None else tuple(tools)


def _spec_tuple(specs: Iterable[AgentSpec]) -> tuple[AgentSpec, ...]:
    return tuple(specs)


@final
@attrs.frozen(kw_only=True)
class AgentSpec:
    """An agent: its prompt, tools, model and limits. Checked on creation.

    Used for top-level agents (:func:`spawn_agent`) and for the sub-agents a session may
    spawn, from Python (``Session.spawn``) or from the model (the ``spawn_agent`` tool,
    which offers the specs in ``agents`` of the spawning session).
    """

    name: str
    """Identifies the spec (the model picks sub-agents by it): a letter, then letters,
    digits, ``_`` or ``-``; 64 characters at most."""
    description: str = ""
    """What the agent is good at, shown to a model choosing whom to spawn."""
    system_prompt: str = ""
    tools: tuple[str | Tool[..., object], ...] | None = attrs.field(
        default=None, converter=_tool_tuple
    )
    """Tool names taken from the parent's tools for the run (a child never gets more than
    its parent by name), or ``Tool`` objects granted explicitly from Python. ``None``:
    the parent's tools for the run."""
    llm: LLM | None = None
    """The model; ``None``: the parent's."""
    model: str | None = None
    """The model name to ask for; ``None``: the parent's."""
    max_rounds: int = 10
    budget: Budget | None = None
    """This agent's limits; a child also never gets more than what remains of its
    parent's run budget."""
    response_format: ResponseFormat | type[Any] | None = None
    """The output schema of the agent's answer: a JSON Schema, or an attrs class or a
    pydantic model whose schema is generated (its results then hold an instance in
    ``RunResult.output``)."""
    lifecycle: Lifecycle = "linked"
    agents: tuple[AgentSpec, ...] = attrs.field(default=(), converter=_spec_tuple)
    """The sub-agents this agent may spawn."""
    context: ContextPolicy | None = None
    """How much of its conversation the model sees and how the rest is compacted
    (``None``: the parent's policy for a sub-agent, else all of it)."""
    max_tokens: int | None = None
    """The most tokens per model answer; ``None``: the parent's for a sub-agent, else the
    provider's default."""
    temperature: float | None = None
    """Sampling temperature; ``None``: the parent's for a sub-agent, else the provider's."""
    tool_concurrency: int | None = None
    """The most tool calls of one round running at once; ``None``: the parent's for a
    sub-agent, else :data:`DEFAULT_TOOL_CONCURRENCY`."""

    def __attrs_post_init__(self) -> None:
        problems = spec_problems(self)
        if problems:
            raise AgentSpecError(str(self.name), problems)

    def own_tools(self) -> tuple[Tool[..., object], ...]:
        """The ``Tool`` objects granted explicitly."""
        return tuple(t for t in self.tools or () if isinstance(t, Tool))

    def tool_names(self) -> tuple[str, ...]:
        """Every tool's name, in order."""
        return tuple(t if isinstance(t, str) else t.name for t in self.tools or ())


def spec_problems(spec: AgentSpec) -> tuple[str, ...]:
    """Every problem with ``spec``, each a line a person can act on (empty when valid)."""
    problems: list[str] = []
    if not isinstance(spec.name, str) or _NAME.fullmatch(spec.name) is None:
        problems.append(
            f"name {spec.name!r} must start with a letter and use only letters, digits, "
            "'_' and '-' (64 characters at most)"
        )
    if not isinstance(spec.max_rounds, int) or spec.max_rounds < 1:
        problems.append(f"max_rounds must be an int >= 1, got {spec.max_rounds!r}")
    problems.extend(_number_problems(spec))
    if spec.lifecycle not in _LIFECYCLES:
        problems.append(
            f"lifecycle must be one of {', '.join(_LIFECYCLES)}, got {spec.lifecycle!r}"
        )
    if spec.tools is not None:
        seen: set[str] = set()
        items: tuple[object, ...] = spec.tools
        for item in items:
            if not isinstance(item, (str, Tool)):
                problems.append(f"tools holds {item!r}: give a tool name or a Tool (@tool)")
                continue
            tool_name = item if isinstance(item, str) else item.name
            if tool_name in seen:
                problems.append(f"tool {tool_name!r} is listed twice")
            seen.add(tool_name)
    try:
        response_format, _ = resolve_format(spec.response_format)
    except UnsupportedTypeError as exc:
        problems.append(str(exc))
    else:
        if response_format is not None:
            problems.extend(
                f"response_format: {p}" for p in schema_problems(response_format.schema)
            )
    context: object = spec.context
    if context is not None and not isinstance(context, ContextPolicy):
        problems.append(f"context must be a ContextPolicy or None, got {context!r}")
    budget: object = spec.budget
    if budget is not None and not isinstance(budget, Budget):
        problems.append(f"budget must be a Budget, got {budget!r}")
    names = [a.name for a in spec.agents]
    for duplicate in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"two sub-agents are named {duplicate!r}")
    return tuple(problems)


def _number_problems(spec: AgentSpec) -> list[str]:
    """The model parameters and limits that must be positive (or ``None``)."""
    problems: list[str] = []
    counts: tuple[tuple[str, object], ...] = (
        ("max_tokens", spec.max_tokens),
        ("tool_concurrency", spec.tool_concurrency),
    )
    for label, value in counts:
        if value is not None and not (_is_int(value) and value >= 1):
            problems.append(f"{label} must be an int >= 1 or None, got {value!r}")
    temperature: object = spec.temperature
    if temperature is not None and not (
        (_is_int(temperature) or isinstance(temperature, float)) and temperature >= 0
    ):
        problems.append(f"temperature must be a number >= 0 or None, got {temperature!r}")
    return problems


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


DEFAULT_TOOL_CONCURRENCY = 8
"""Tool calls of one round running at once, unless the spec says otherwise."""


class AgentOptions(TypedDict, total=False):
    """An agent's options as keywords (``spawn_session(runtime, system_prompt=...)``):
    :class:`AgentSpec`'s fields by the same names, documented and checked there. Only
    ``tools`` takes more: any tool source (MCP servers, a ``ToolRegistry``), expanded into
    the spec's tools. The spec's identity (``name``, ``description``, ``lifecycle``) and its
    model (``llm``, which the functions take as a fallback) are not options."""

    system_prompt: str
    tools: Iterable[object] | ToolRegistry
    model: str | None
    max_rounds: int
    budget: Budget | None
    response_format: FormatArg
    agents: Iterable[AgentSpec]
    context: ContextPolicy | None
    max_tokens: int | None
    temperature: float | None
    tool_concurrency: int | None


AGENT_OPTIONS: frozenset[str] = frozenset(AgentOptions.__annotations__)
"""The names :class:`AgentOptions` takes."""


def with_options(spec: AgentSpec | None, options: Mapping[str, Any], *, caller: str) -> AgentSpec:
    """``spec`` with ``options`` in place of its own (a new spec named ``session`` when
    ``spec`` is ``None``); ``options["tools"]`` must already hold tools, not servers.

    Raises:
        UnsupportedTypeError, ToolDefinitionError: ``options["response_format"]`` has no
            JSON Schema form, or a malformed one.
        TypeError: an option is not one of :class:`AgentOptions` (named as Python names
            an unexpected keyword argument of ``caller``).
        AgentSpecError: the resulting spec is invalid (every problem listed).
    """
    if not AGENT_OPTIONS.issuperset(options):
        unknown = sorted(options.keys() - AGENT_OPTIONS)
        msg = f"{caller}() got an unexpected keyword argument {unknown[0]!r}"
        raise TypeError(msg)
    if "response_format" in options:
        # A format the spec would list as a problem keeps the typed error a keyword has
        # always raised (UnsupportedTypeError, ToolDefinitionError: TypeErrors).
        response_format, _ = resolve_format(options["response_format"])
        if response_format is not None:
            check_schema(response_format.schema)
    if spec is None:
        return AgentSpec(name=_BARE.name, **options) if options else _BARE  # checks every value
    return attrs.evolve(spec, **options) if options else spec


_BARE = AgentSpec(name="session")
"""The agent of a session given no option: every default."""

SPAWN_AGENT = "spawn_agent"


def spawn_agent_tool(agents: Iterable[AgentSpec]) -> Tool[..., object]:
    """The ``spawn_agent`` tool offering ``agents`` to the model.

    The session runs its calls itself (as child sessions); the function is never called.
    It is idempotent by call id, hence the ``retry`` crash policy: after a crash the same
    child is reattached, never spawned twice.
    """
    agents = tuple(agents)
    listing = "\n".join(
        f"- {a.name}: {a.description or a.system_prompt[:120] or 'a general helper'}"
        for a in agents
    )

    def spawn(agent: str, task: str) -> str:
        msg = "spawn_agent is run by the session actor, which never calls this function"
        raise RuntimeError(msg)

    return tool(
        name=SPAWN_AGENT,
        description=(
            "Start a sub-agent on a task and wait for its answer. Several calls in one "
            "turn run in parallel. Available agents:\n" + listing
        ),
        crash_policy="retry",
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": [a.name for a in agents]},
                "task": {
                    "type": "string",
                    "minLength": 1,
                    "description": "everything the sub-agent needs to know, self-contained",
                },
            },
            "required": ["agent", "task"],
            "additionalProperties": False,
        },
    )(spawn)


def child_tools(
    spec: AgentSpec, parent_tools: ToolRegistry
) -> tuple[ToolRegistry, tuple[str, ...]]:
    """The child's registry and the names it asked for that its parent does not have."""
    if spec.tools is None:
        names = tuple(n for n in parent_tools.names() if n != SPAWN_AGENT)
        return parent_tools.subset(names), ()
    missing = tuple(
        item for item in spec.tools if isinstance(item, str) and item not in parent_tools
    )
    registry = ToolRegistry()
    for item in spec.tools:
        if isinstance(item, Tool):
            registry.add(item)
        elif item in parent_tools and item != SPAWN_AGENT:
            registry.add(parent_tools.get(item))
    return registry, missing


def top_level_tools(spec: AgentSpec) -> tuple[Tool[..., object], ...]:
    """The tools of ``spec`` run as a top-level agent, which has no parent to take tools
    from by name.

    Raises:
        ConfigError: ``spec.tools`` names a tool instead of giving it.
    """
    tools = spec.tools or ()
    named = [t for t in tools if isinstance(t, str)]
    if named:
        msg = (
            f"agent spec {spec.name!r} names tools ({', '.join(named)}) but a top-level agent "
            "has no parent to take them from: give Tool objects"
        )
        raise ConfigError(msg)
    return cast("tuple[Tool[..., object], ...]", tools)  # the spec holds only Tools here


def index_agents(agents: Iterable[AgentSpec]) -> Mapping[str, AgentSpec]:
    """Specs by name."""
    return {a.name: a for a in agents}
