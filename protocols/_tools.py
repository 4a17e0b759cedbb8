"""Tool specs and tool outcomes: what a tool looks like to a model and what a call produced."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from typing import Final, Literal, final

import attrs
import orjson

from ._types import JsonObject
from .errors import ToolArgumentsError, ToolDefinitionError, ToolInterruptedError

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "CrashPolicy",
    "ToolOutcome",
    "ToolSpec",
    "ToolStatus",
    "aborted_outcome",
    "denied_outcome",
    "idempotency_key",
    "interrupted_outcome",
    "nests_deeper_than",
    "parse_tool_arguments",
    "validate_tool_name",
]

CrashPolicy = Literal["retry", "abort", "ask"]
"""What recovery does with a tool call that started but never finished.

``retry`` runs it again (an idempotent tool), ``abort`` closes it with an aborted result,
``ask`` waits for a human to decide.
"""

ToolStatus = Literal[
    "ok", "error", "invalid_arguments", "timeout", "interrupted", "aborted", "denied"
]
"""How a tool call ended; everything but ``"ok"`` is reported to the model as an error."""

_TOOL_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def validate_tool_name(name: str) -> str:
    """Check that ``name`` is a tool name every provider accepts, and return it.

    OpenAI and Anthropic both restrict function names to ``^[a-zA-Z0-9_-]{1,64}$``; a
    name outside that set is refused by the provider only at request time, far from the
    definition, so we refuse it where the tool is defined.

    Args:
        name (str): the proposed tool name.

    Returns:
        The same name.

    Raises:
        ToolDefinitionError: the name is empty, longer than 64 characters, or holds a
            character other than ASCII letters, digits, ``_`` and ``-``.
    """
    if not isinstance(name, str) or _TOOL_NAME.fullmatch(name) is None:
        raise ToolDefinitionError(
            f"invalid tool name {name!r}: use 1 to 64 characters from a-z, A-Z, 0-9, '_' "
            "and '-' (the providers' rule)"
        )
    return name


@final
@attrs.frozen(kw_only=True)
class ToolSpec:
    """What a model is told about one tool.

    This is the provider-neutral description a transport turns into OpenAI ``tools`` or
    Anthropic ``tools`` entries, plus the runtime facts the session actor needs around a
    call (crash policy, timeout, approval). It holds no callable, so it can live in events.
    ``parameters`` is opaque JSON: it is stored and sent as is, never walked per value.

    .. note:: ``parameters`` is a dict, so specs compare by value but are not hashable.
    """

    name: str = attrs.field(validator=lambda _i, _a, v: validate_tool_name(v))
    """The tool name the model calls (``^[a-zA-Z0-9_-]{1,64}$``)."""
    description: str
    """What the tool does, for the model."""
    parameters: JsonObject
    """The JSON Schema (an object schema) of the call's arguments; opaque to the codec."""
    crash_policy: CrashPolicy = "abort"
    """What recovery does with a call that started but did not finish."""
    timeout: float | None = None
    """Seconds a call may take before it ends with a ``timeout`` outcome; ``None``: no limit."""
    needs_approval: bool = False
    """A human must approve each call before it runs."""


@final
@attrs.frozen(kw_only=True)
class ToolOutcome:
    """How one tool call ended, as the model will be told.

    Every call gets exactly one outcome, including the ones that never ran (unknown tool,
    bad arguments, denied, interrupted), so the transcript stays provider-valid (invariant 5).
    """

    call_id: str
    """The provider's id of the tool call this answers."""
    tool_name: str
    """The tool the model called (possibly one that does not exist)."""
    status: ToolStatus
    """How the call ended."""
    content: str
    """The text the model sees: the result, or what went wrong and how to fix it."""
    error_code: str | None = None
    """The stable powertrio error code of a failure (``tool.timeout``, ...), else ``None``."""

    @property
    def is_error(self) -> bool:
        """Whether the model should see this outcome as an error (every status but ``ok``)."""
        return self.status != "ok"


def idempotency_key(session_id: str, call_id: str, *, round_index: int | None = None) -> str:
    """Derive the idempotency key of one tool call, the same on every replay and resume.

    A ``retry`` tool is re-run after a crash; the key lets it (or the API it calls) notice
    the repeat. It is a hash of the session id and the call id (and the round, for
    providers or scripted models that reuse call ids across rounds), so it is short,
    has a fixed length and reveals nothing about the inputs. The parts are
    length-prefixed, so ``("a/b", "c")`` and ``("a", "b/c")`` differ.

    Args:
        session_id (str): the session that owns the call.
        call_id (str): the provider's id of the tool call.
        round_index (int | None): the round of the run, when call ids may repeat.

    Returns:
        ``"pt-"`` followed by 32 hexadecimal digits.
    """
    # Each part's length (8 bytes, big-endian), then its UTF-8, hashed in one call.
    session = session_id.encode("utf-8")
    call = call_id.encode("utf-8")
    data = len(session).to_bytes(8, "big") + session + len(call).to_bytes(8, "big") + call
    if round_index is not None:
        index = str(round_index).encode("utf-8")
        data += len(index).to_bytes(8, "big") + index
    return "pt-" + hashlib.sha256(data).hexdigest()[:32]


def interrupted_outcome(call_id: str, tool_name: str) -> ToolOutcome:
    """Build the outcome of a call cancelled before it finished.

    Args:
        call_id (str): the call that was cut short.
        tool_name (str): the tool it called.

    Returns:
        An ``interrupted`` outcome with code ``tool.interrupted``; never a fake success.
    """
    return ToolOutcome(
        call_id=call_id,
        tool_name=tool_name,
        status="interrupted",
        content=str(ToolInterruptedError(tool_name)),
        error_code=ToolInterruptedError.code,
    )


def aborted_outcome(call_id: str, tool_name: str, reason: str) -> ToolOutcome:
    """Build the outcome of a call closed at recovery under the ``abort`` crash policy.

    Args:
        call_id (str): the call that started but never finished.
        tool_name (str): the tool it called.
        reason (str): why it was closed (e.g. "the process crashed while it ran").

    Returns:
        An ``aborted`` outcome whose content tells the model the result is unknown.
    """
    return ToolOutcome(
        call_id=call_id,
        tool_name=tool_name,
        status="aborted",
        content=f"tool {tool_name!r} was aborted and its result is unknown: {reason}",
    )


def denied_outcome(call_id: str, tool_name: str, reason: str) -> ToolOutcome:
    """Build the outcome of a call a human (or the lack of an approval) did not allow.

    Args:
        call_id (str): the call that was not run.
        tool_name (str): the tool it called.
        reason (str): why it was denied, for the model.

    Returns:
        A ``denied`` outcome; the tool did not run.
    """
    return ToolOutcome(
        call_id=call_id,
        tool_name=tool_name,
        status="denied",
        content=f"tool {tool_name!r} was not run: {reason}",
    )


# --- parsing a call's arguments ------------------------------------------------------

#: Floats at least this large may be integers orjson could not hold exactly (it parses
#: integer literals beyond 64 bits as doubles).
_INEXACT: Final = float(2**63)


#: The most arrays and objects a call's arguments may nest inside each other (the
#: arguments object itself is level 1). Real arguments stay far below it; deeper values
#: break what reads them later (recursive checks, and orjson writes no more than 255
#: levels), so they are refused where they are parsed.
MAX_ARGUMENT_DEPTH: Final = 128

_TOO_DEEP: Final = f"$: arrays and objects nest more than {MAX_ARGUMENT_DEPTH} levels deep"


class _TooLargeError(ValueError):
    """A number in the arguments that no Python number can hold."""


class _TooDeepError(ValueError):
    """The arguments nest deeper than :data:`MAX_ARGUMENT_DEPTH`."""


def parse_tool_arguments(name: str, text: str) -> object:
    """Parse the raw JSON arguments of a call to tool ``name``.

    Integers are exact whatever their size: ``10**400`` is a valid JSON integer and Python
    ints are unbounded, so a tool taking an ``int`` gets it exactly (orjson, used for the
    common case, reads integers beyond 64 bits as doubles or refuses them as infinity;
    those arguments are parsed again by the standard library). Empty text is ``{}``, as
    some models send it for calls without arguments.

    Args:
        name (str): the tool's name, for the error.
        text (str): the arguments as the model wrote them.

    Returns:
        (object): the decoded JSON value (the schema check comes next).

    Raises:
        ToolArgumentsError: the text is not JSON (the message quotes the parser, with the
            position in the text as sent), a number is too large for any Python number
            (a float beyond a 64-bit double, or an integer with more digits than
            ``sys.get_int_max_str_digits()``), or arrays and objects nest more than
            :data:`MAX_ARGUMENT_DEPTH` levels deep.
    """
    if not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("Recursion limit reached"):  # orjson stops at 1024 levels
            raise ToolArgumentsError(name, (_TOO_DEEP,)) from exc
        exact = _loads_exact(name, text)
        if exact is None:
            raise ToolArgumentsError(name, (f"$: not valid JSON ({exc})",)) from exc
        return exact[0]
    try:
        inexact = _scan(value, 1)
    except _TooDeepError as exc:
        raise ToolArgumentsError(name, (_TOO_DEEP,)) from exc
    if inexact:
        exact = _loads_exact(name, text)
        if exact is not None:
            return exact[0]
    return value


def nests_deeper_than(value: object, limit: int) -> bool:
    """Whether arrays and objects in ``value`` nest more than ``limit`` levels deep.

    The walk stops at ``limit``, so it never recurses deeper than that, whatever ``value``.

    Args:
        value (object): a decoded JSON value (the value itself, if an array or an object,
            is level 1).
        limit (int): the most levels allowed.

    Returns:
        (bool): True when some array or object sits deeper than ``limit``.
    """
    if isinstance(value, dict):
        if limit < 1:
            return True
        return any(nests_deeper_than(item, limit - 1) for item in value.values())
    if isinstance(value, list):
        if limit < 1:
            return True
        return any(nests_deeper_than(item, limit - 1) for item in value)
    return False


def _loads_exact(name: str, text: str) -> tuple[object] | None:
    """The value parsed with exact integers, or None when the text is not (encodable) JSON."""
    try:
        value = json.loads(
            text, parse_int=_exact_int, parse_float=_finite_float, parse_constant=_no_constant
        )
    except _TooLargeError as exc:
        raise ToolArgumentsError(name, (f"$: {exc}",)) from exc
    except RecursionError as exc:  # the stdlib parser recurses once per level
        raise ToolArgumentsError(name, (_TOO_DEEP,)) from exc
    except ValueError:
        return None
    if nests_deeper_than(value, MAX_ARGUMENT_DEPTH):
        raise ToolArgumentsError(name, (_TOO_DEEP,))
    if _has_lone_surrogate(value):  # orjson's refusal stands; such text cannot be stored
        return None
    return (value,)


def _exact_int(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    limit = sys.get_int_max_str_digits()
    if limit and digits > limit:
        msg = f"an integer of {digits} digits is too large (the limit is {limit} digits)"
        raise _TooLargeError(msg)
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        msg = f"the number {literal} is too large for a 64-bit float"
        raise _TooLargeError(msg)
    return value


def _no_constant(literal: str) -> object:
    msg = f"{literal} is not a JSON number"
    raise ValueError(msg)


def _scan(value: object, depth: int) -> bool:
    """Whether ``value`` (at level ``depth``) holds a float that may be an inexact integer.

    The one walk over the arguments also checks their depth (_TooDeepError), so it never
    recurses past :data:`MAX_ARGUMENT_DEPTH`.
    """
    if isinstance(value, float):
        return abs(value) >= _INEXACT
    if isinstance(value, (dict, list)):
        if depth > MAX_ARGUMENT_DEPTH:
            raise _TooDeepError
        items = value.values() if isinstance(value, dict) else value
        inexact = False
        for item in items:  # no early exit: every branch's depth is checked
            kind = type(item)  # orjson's own types: a str, int, bool or None needs no call
            if (kind is dict or kind is list or kind is float) and _scan(item, depth + 1):
                inexact = True
        return inexact
    return False


def _has_lone_surrogate(value: object) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(item) for item in value)
    return False
