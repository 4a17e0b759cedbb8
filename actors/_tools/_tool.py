"""Tools: the ``@tool`` decorator, the ``Tool`` it builds, and the registry that holds them."""

from __future__ import annotations

import inspect
import logging
import threading
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, Literal, ParamSpec, TypeVar, final, overload

import attrs
from cattrs.strategies import configure_union_passthrough

from protocols import CrashPolicy, JsonObject, ToolDefinition, ToolSpec
from protocols.codec import make_converter
from protocols.errors import (
    ToolArgumentsError,
    ToolDefinitionError,
    ToolInterruptedError,
    ToolNotFoundError,
)
from protocols.jsonschema import CompiledSchema, compile_schema
from protocols.lowlevel import configure_models, structure_problems, validate_tool_name
from runtime import Runtime  # at run time: the metadata fix-up resolves hints

from ._schema import ToolParameter, is_context_annotation, parse_docstring, parse_function

__all__ = ["Tool", "ToolContext", "ToolKind", "ToolRegistry", "tool"]

_log = logging.getLogger("powertrio.tools")

P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")

ToolKind = Literal["sync", "trio", "asyncio"]
"""How a tool runs: in a worker thread, natively in Trio, or through trio-asyncio."""

_CONVERTER = make_converter()
configure_union_passthrough(str | int | float | bool | None, _CONVERTER)
configure_models(_CONVERTER)  # pydantic models as parameters and results, if in use


_EVENT_LOCK = threading.Lock()


@final
@attrs.define(eq=False)
class ToolContext:
    """What the runtime tells a tool about the call it is serving.

    A tool asks for it by annotating a parameter with ``ToolContext``; that parameter is
    left out of the schema, so the model can never forge the caller's identity. Sync tools
    run in a worker thread that Trio cannot cancel: they poll :attr:`cancelled` (or call
    :meth:`check_cancelled`) to stop early once the call is interrupted or timed out.
    """

    call_id: str
    """The provider's id of the tool call."""
    tool_name: str
    """The tool being called."""
    session_id: str
    """The session (caller identity) on whose behalf the tool runs; stamped by the runtime."""
    idempotency_key: str
    """Stable across replays and crash resumes; pass it to APIs that dedupe requests."""
    runtime: Runtime | None = attrs.field(default=None, kw_only=True)
    """The runtime the calling session runs in (``None`` when a tool is called outside
    one, as in a unit test). Built-in tools find their board or timers through it, so they
    are plain values an :class:`AgentSpec` can hold, made before any runtime exists."""
    _traceparent_of: Callable[[str], str | None] | None = attrs.field(
        default=None, kw_only=True, alias="traceparent_of", repr=False
    )
    # Hashing the trace ids costs microseconds most calls never need: the runner gives
    # the function of the call id that makes them, and :attr:`traceparent` calls it.
    # Made at the first look (most calls never cancel nor wait): an Event costs a
    # Condition and a lock, a visible share of a tool call's CPU.
    _cancelled_event: threading.Event | None = attrs.field(default=None, init=False)

    @property
    def _cancelled(self) -> threading.Event:
        event = self._cancelled_event
        if event is None:
            with _EVENT_LOCK:  # a tool's thread and the runner may look at once
                event = self._cancelled_event
                if event is None:
                    event = self._cancelled_event = threading.Event()
        return event

    @property
    def traceparent(self) -> str | None:
        """The W3C trace context of this call's span (``None`` outside a session's run).

        A tool that hands work to something traced apart from its session (a session it
        creates on another node with ``NodeHost.create``, a service of your own) passes
        it on, so that work's spans join the caller's trace under this call's span, as a
        sub-agent's do.
        """
        make = self._traceparent_of
        return None if make is None else make(self.call_id)

    @property
    def cancelled(self) -> bool:
        """Whether the call was interrupted or timed out; its result will be discarded."""
        event = self._cancelled_event
        return event is not None and event.is_set()

    def check_cancelled(self) -> None:
        """Raise if the call was cancelled, so a sync tool can stop at a convenient point.

        Raises:
            ToolInterruptedError: the call was interrupted or timed out.
        """
        if self._cancelled.is_set():
            raise ToolInterruptedError(self.tool_name)

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block the calling thread until the call is cancelled or ``timeout`` passes.

        Meant for sync tools that would otherwise ``time.sleep``: they wake up at once
        when the call is cancelled. Never call it from a Trio task.

        Args:
            timeout (float | None): the most seconds to wait; ``None`` waits for good.

        Returns:
            Whether the call is cancelled.
        """
        return self._cancelled.wait(timeout)

    def cancel(self) -> None:
        """Mark the call cancelled (the runner does this when it abandons the call)."""
        self._cancelled.set()


@final
@attrs.frozen(eq=False)
class Tool(Generic[P, R_co]):
    """A callable offered to a model: its :class:`ToolSpec` plus how to call it.

    Build one with :func:`tool`. The object still calls through to the function, so
    ``weather("Oslo")`` works in your own code and tests; the model's calls go through
    :func:`run_tool_calls`, which validates and converts the arguments first.
    """

    spec: ToolSpec
    """What the model is told (name, description, schema, policy)."""
    function: Callable[P, R_co]
    """The wrapped function."""
    kind: ToolKind
    """How it runs: thread, Trio or asyncio."""
    validator: CompiledSchema = attrs.field(repr=False)
    """The compiled parameters schema."""
    fields: tuple[ToolParameter, ...] | None = attrs.field(repr=False)
    """The typed parameters, or ``None`` for a hand-written schema (raw JSON values)."""
    context_parameter: str | None = attrs.field(repr=False)
    """The parameter that receives the :class:`ToolContext`, if any."""

    @property
    def name(self) -> str:
        """The tool name the model calls."""
        return self.spec.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        """Call the wrapped function directly (no validation; for your own code)."""
        return self.function(*args, **kwargs)

    def bind(
        self, arguments: Mapping[str, object], context: ToolContext
    ) -> tuple[list[object], dict[str, object]]:
        """Turn validated JSON arguments into the Python call arguments.

        attrs classes, enums, tuples and the like are structured with cattrs, pydantic
        models with ``model_validate``; parameters the model left out keep their Python
        default.

        Args:
            arguments (Mapping[str, object]): the decoded JSON object, already validated.
            context (ToolContext): passed to the context parameter, if there is one.

        Returns:
            The positional and the keyword arguments.

        Raises:
            ToolArgumentsError: a value passed the schema but cannot become the Python type.
        """
        positional: list[object] = []
        keywords: dict[str, object] = {}
        if self.fields is None:
            keywords.update(arguments)
        else:
            problems: list[str] = []
            for param in self.fields:
                if param.name not in arguments:
                    continue
                try:
                    value: object = _CONVERTER.structure(
                        arguments[param.name], typing.cast(type[object], param.annotation)
                    )
                except Exception as exc:
                    problems.extend(structure_problems(exc, f"$.{param.name}"))
                    continue
                if param.positional_only:
                    positional.append(value)
                else:
                    keywords[param.name] = value
            if problems:
                raise ToolArgumentsError(self.spec.name, tuple(problems))
        if self.context_parameter is not None:
            keywords[self.context_parameter] = context
        return positional, keywords


@overload
def tool(function: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    crash_policy: CrashPolicy = "abort",
    timeout: float | None = None,
    needs_approval: bool = False,
    asyncio: bool = False,
    parameters: JsonObject | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    function: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    crash_policy: CrashPolicy = "abort",
    timeout: float | None = None,
    needs_approval: bool = False,
    asyncio: bool = False,
    parameters: JsonObject | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Turn a function into a :class:`Tool`; use it bare (``@tool``) or with options.

    The JSON Schema of the parameters comes from the signature's annotations: ``str``,
    ``int``, ``float``, ``bool``, ``None``, ``Any``, ``Literal[...]``, enums, attrs
    classes (nested), ``X | None`` and other unions, ``list``/``Sequence``/``set``/
    ``frozenset``/``tuple`` of X, ``dict``/``Mapping`` of ``str`` to X, and
    ``Annotated[X, "a description"]``; a parameter annotated
    :class:`ToolContext` receives the call's context and is not shown to the model. The
    description comes from the docstring's first paragraph, and each parameter's from its
    ``Args:`` section. A ``def`` runs in a worker thread, an ``async def`` natively in
    Trio, and an ``async def`` marked ``asyncio=True`` through trio-asyncio.

    Args:
        function (Callable | None): the function, when used bare.
        name (str | None): the tool name; defaults to the function's name.
        description (str | None): overrides the docstring summary.
        crash_policy (CrashPolicy): what recovery does with a call that never finished.
        timeout (float | None): seconds before a call ends with a ``timeout`` outcome.
        needs_approval (bool): a human must approve each call before it runs.
        asyncio (bool): the ``async def`` is an asyncio coroutine function.
        parameters (JsonObject | None): a hand-written object schema; the function then
            receives the raw JSON values as keyword arguments.

    Returns:
        The tool, or a decorator that builds it.

    Raises:
        ToolDefinitionError: a bad name, schema, annotation or timeout, or
            ``asyncio=True`` on a plain function; the message names the parameter.
    """

    def build(fn: Callable[P, R]) -> Tool[P, R]:
        return _build_tool(
            fn,
            name=name,
            description=description,
            crash_policy=crash_policy,
            timeout=timeout,
            needs_approval=needs_approval,
            asyncio=asyncio,
            parameters=parameters,
        )

    if function is not None:
        return build(function)
    return build


def _build_tool(
    fn: Callable[P, R],
    *,
    name: str | None,
    description: str | None,
    crash_policy: CrashPolicy,
    timeout: float | None,
    needs_approval: bool,
    asyncio: bool,
    parameters: JsonObject | None,
) -> Tool[P, R]:
    tool_name = validate_tool_name(name if name is not None else getattr(fn, "__name__", ""))
    if crash_policy not in ("retry", "abort", "ask"):
        raise ToolDefinitionError(
            f"tool {tool_name!r}: crash_policy must be 'retry', 'abort' or 'ask', "
            f"got {crash_policy!r}"
        )
    if timeout is not None and not timeout > 0:
        raise ToolDefinitionError(f"tool {tool_name!r}: timeout must be > 0 s, got {timeout!r}")
    is_async = inspect.iscoroutinefunction(fn)
    if asyncio and not is_async:
        raise ToolDefinitionError(f"tool {tool_name!r}: asyncio=True needs an 'async def' function")
    kind: ToolKind = ("asyncio" if asyncio else "trio") if is_async else "sync"
    fields: tuple[ToolParameter, ...] | None
    if parameters is None:
        parsed = parse_function(fn, context_type=ToolContext, what=f"tool {tool_name!r}")
        schema, fields, context = parsed.parameters, parsed.fields, parsed.context_parameter
        summary = parsed.description
    else:
        if parameters.get("type") != "object":
            raise ToolDefinitionError(
                f'tool {tool_name!r}: a parameters schema must have "type": "object"'
            )
        schema, fields, context = parameters, None, _context_parameter(fn)
        summary = parse_docstring(inspect.getdoc(fn))[0]
    try:
        validator = compile_schema(schema)
    except ToolDefinitionError as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: {exc}") from exc
    spec = ToolSpec(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=schema,
        crash_policy=crash_policy,
        timeout=timeout,
        needs_approval=needs_approval,
    )
    return Tool(
        spec=spec,
        function=fn,
        kind=kind,
        validator=validator,
        fields=fields,
        context_parameter=context,
    )


def _context_parameter(fn: Callable[..., object]) -> str | None:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # a hand-written schema needs no other hints to resolve
        _log.warning(
            "tool function %s: its type hints do not resolve (%s: %s); a ToolContext "
            "parameter is recognised by the text of its annotation only",
            getattr(fn, "__qualname__", repr(fn)),
            type(exc).__name__,
            exc,
        )
        hints = {}
    for param_name, param in inspect.signature(fn).parameters.items():
        annotation = hints.get(param_name, param.annotation)
        if is_context_annotation(annotation, ToolContext) or annotation == "ToolContext":
            return param_name
    return None


class _ToolDoc:
    """``Tool.__doc__``: the class's docstring on the class, the tool's own on a tool, so
    ``help(ask_human)`` says what ``ask_human`` does rather than what a ``Tool`` is."""

    def __init__(self, class_doc: str | None) -> None:
        self._class_doc = class_doc

    def __get__(self, instance: object, owner: type | None = None) -> str | None:
        if not isinstance(instance, Tool):
            return self._class_doc
        own = inspect.getdoc(instance.function) or instance.spec.description
        return f"The tool {instance.name!r}: {own}"


Tool.__doc__ = _ToolDoc(Tool.__doc__)  # type: ignore[assignment]  # a descriptor


@final
@attrs.define(eq=False)
class ToolRegistry:
    """The tools available to an agent, by name.

    A registry is plain data (no I/O); :meth:`subset` gives a sub-agent a narrower set.
    """

    _tools: dict[str, Tool[..., object]] = attrs.field(factory=dict, alias="tools")
    _definitions: tuple[ToolDefinition, ...] | None = attrs.field(
        default=None, init=False, eq=False, repr=False
    )
    """:meth:`definitions`, made once per set of tools: every model call offers them, and
    the same tuple lets the request's fingerprint reuse its canonical form."""

    @classmethod
    def of(cls, *tools: Tool[..., object]) -> ToolRegistry:
        """Build a registry holding ``tools``.

        Raises:
            ToolDefinitionError: two tools share a name.
        """
        registry = cls()
        for item in tools:
            registry.add(item)
        return registry

    def add(self, item: Tool[..., object]) -> None:
        """Register a tool.

        Args:
            item (Tool): the tool, from :func:`tool`.

        Raises:
            ToolDefinitionError: another tool already has this name, or ``item`` is not a
                :class:`Tool` (decorate the function with ``@tool``).
        """
        if not isinstance(item, Tool):
            raise ToolDefinitionError(
                f"{item!r} is not a Tool; decorate the function with @tool first"
            )
        if item.name in self._tools:
            raise ToolDefinitionError(f"a tool named {item.name!r} is already registered")
        self._tools[item.name] = item
        self._definitions = None

    def get(self, name: str) -> Tool[..., object]:
        """Return the tool called ``name``.

        Raises:
            ToolNotFoundError: no tool has this name; the message lists the available ones.
        """
        try:
            return self._tools[name]
        except KeyError:
            raise ToolNotFoundError(name, self.names()) from None

    def names(self) -> tuple[str, ...]:
        """The registered tool names, in registration order."""
        return tuple(self._tools)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A new registry with only the named tools.

        Raises:
            ToolNotFoundError: a name is not registered.
        """
        return ToolRegistry.of(*(self.get(n) for n in names))

    def specs(self) -> tuple[ToolSpec, ...]:
        """The specs of every tool, in registration order."""
        return tuple(t.spec for t in self._tools.values())

    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The tools as an ``LLMRequest`` offers them to a provider."""
        definitions = self._definitions
        if definitions is None:
            definitions = self._definitions = tuple(
                ToolDefinition(name=s.name, description=s.description, parameters=s.parameters)
                for s in self.specs()
            )
        return definitions

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool[..., object]]:
        return iter(self._tools.values())
