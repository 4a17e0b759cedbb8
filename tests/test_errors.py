"""The error tree: unique dotted codes per branch, the documented tree, messages, built-in bases."""

from __future__ import annotations

import builtins
import importlib
import re
from pathlib import Path

import attrs
import pytest

from protocols import errors
from protocols.errors import (
    ActorExistsError,
    ActorNotFoundError,
    AskTimeoutError,
    ConcurrencyConflictError,
    ConfigError,
    EventEncodeError,
    IntensityExceededError,
    LLMTimeoutError,
    MissingExtraError,
    MissingSettingError,
    PowertrioError,
    StreamNotFoundError,
    ToolDefinitionError,
    ToolNotFoundError,
    UnknownEventTypeError,
)

CODE = re.compile(r"[a-z][a-z_]*(\.[a-z][a-z_]*)*")
"""A code: dotted lowercase segments, e.g. ``llm.rate_limited``."""

TREE_LINE = re.compile(
    r"^(?P<indent>[\s│├└─]*?)(?P<name>[A-Z]\w*)(?: \((?P<bases>[\w, ]+)\))?\s+\[(?P<code>[\w.]+)\]$"
)
"""One line of the module docstring's tree: ``├── Name (BuiltinBase)   [code]``."""

BRANCH_PREFIX = {
    "ConfigError": "config",
    "ActorError": "actor",
    "SupervisorError": "supervisor",
    "StoreError": "store",
    "CodecError": "codec",
    "LLMError": "llm",
    "ToolError": "tool",
    "SessionError": "session",
    "ReplayError": "replay",
    "BoardError": "board",
    "TimerError": "timer",
    "LimitError": "limit",
    "FileAccessError": "io",
    "WorkflowError": "workflow",
}
"""Each sub-root of the tree and the first segment every code in its branch starts with."""


@attrs.frozen
class TreeEntry:
    """One class as the docstring draws it."""

    name: str
    """The class name."""
    code: str
    """The code in brackets."""
    parent: str | None
    """The entry it hangs under (``None`` for the root)."""
    builtin_bases: tuple[str, ...]
    """Built-in exceptions named in parentheses."""


def documented_tree() -> list[TreeEntry]:
    """Parse the tree drawn in ``protocols.errors.__doc__``."""
    assert errors.__doc__ is not None
    entries: list[TreeEntry] = []
    stack: list[tuple[int, str]] = []  # (column of the name, name) of the open ancestors
    for line in errors.__doc__.splitlines():
        match = TREE_LINE.match(line)
        if match is None:
            continue
        column = len(match["indent"])
        while stack and stack[-1][0] >= column:
            stack.pop()
        bases = tuple(b.strip() for b in (match["bases"] or "").split(",") if b.strip())
        parent = stack[-1][1] if stack else None
        entries.append(TreeEntry(match["name"], match["code"], parent, bases))
        stack.append((column, match["name"]))
    return entries


PINNED_CODES = Path(__file__).parent / "data" / "error_codes.txt"
"""Every error code with the class that carries it, one ``code Name`` a line."""

PINNED_API = Path(__file__).parent / "data" / "public_api.txt"


def public_error_classes() -> dict[str, type[PowertrioError]]:
    """Every error class a public namespace exports, by qualified public name.

    Read from the public modules the pinned API lists, so an error that lives with its
    feature (``actors.board.BoardConflictError``) counts even before anything raised it.
    """
    found: dict[str, type[PowertrioError]] = {}
    for line in PINNED_API.read_text(encoding="utf-8").splitlines():
        module_name, name = line.split()
        obj = getattr(importlib.import_module(module_name), name)
        if isinstance(obj, type) and issubclass(obj, PowertrioError):
            found[f"{module_name}.{name}"] = obj
    return found


def test_codes_are_the_pinned_ones() -> None:
    """A code is a contract with callers: none changes, disappears or appears unnoticed.

    ``tests/data/error_codes.txt`` is the record; wherever a class lives, its code stays.
    """
    pinned = PINNED_CODES.read_text(encoding="utf-8").splitlines()
    actual = sorted({f"{cls.code} {cls.__name__}" for cls in public_error_classes().values()})
    assert pinned == actual


def test_every_error_has_one_public_home() -> None:
    """Each error class is exported by exactly one public namespace, the one it reports.

    The root alone is also at the top of ``protocols``, for ``except PowertrioError``.
    """
    homes: dict[type[PowertrioError], list[str]] = {}
    for qualified, cls in public_error_classes().items():
        if qualified != "protocols.PowertrioError":
            homes.setdefault(cls, []).append(qualified)
    wrong = [
        f"{cls.__name__}: {names}"
        for cls, names in homes.items()
        if names != [f"{cls.__module__}.{cls.__name__}"]
    ]
    expected: list[str] = []
    assert expected == wrong


def library_error_classes() -> list[type[PowertrioError]]:
    """The error classes powertrio defines, wherever they live (tests may subclass the root
    for their own use)."""
    return sorted(set(public_error_classes().values()), key=lambda cls: cls.code)


def shared_error_classes() -> list[type[PowertrioError]]:
    """The classes ``protocols.errors`` holds: the vocabulary every layer shares."""
    return [cls for cls in library_error_classes() if cls.__module__ == "protocols.errors"]


def _branch(cls: type[PowertrioError]) -> type[PowertrioError]:
    """The sub-root of the branch ``cls`` belongs to (the root for the root itself)."""
    for ancestor in reversed(cls.__mro__):
        if (
            isinstance(ancestor, type)
            and issubclass(ancestor, PowertrioError)
            and ancestor is not PowertrioError
        ):
            return ancestor
    return PowertrioError


def test_codes_are_unique() -> None:
    """No two error classes share a code: callers branch on it."""
    codes = [cls.code for cls in {*errors.all_error_classes(), *public_error_classes().values()}]
    duplicates = sorted({code for code in codes if codes.count(code) > 1})
    expected: list[str] = []
    assert expected == duplicates


def test_every_class_declares_its_own_code() -> None:
    """Each class sets ``code`` itself instead of inheriting its parent's."""
    inherited = [cls.__name__ for cls in library_error_classes() if "code" not in vars(cls)]
    expected: list[str] = []
    assert expected == inherited


@pytest.mark.parametrize("cls", library_error_classes(), ids=lambda cls: cls.__name__)
def test_code_is_dotted_lowercase_and_starts_with_its_branch(cls: type[PowertrioError]) -> None:
    """``llm.rate_limited`` lives under ``LLMError``; ``actor.not_found`` under ``ActorError``."""
    assert CODE.fullmatch(cls.code) is not None, cls.code
    branch = _branch(cls)
    expected = "powertrio" if branch is PowertrioError else BRANCH_PREFIX[branch.__name__]
    assert expected == cls.code.split(".")[0]


def test_branches_are_the_documented_sub_roots() -> None:
    """The direct children of the root are exactly the branches with a code prefix."""
    expected = sorted(BRANCH_PREFIX)
    actual = sorted(
        cls.__name__ for cls in library_error_classes() if cls.__bases__[0] is PowertrioError
    )
    assert expected == actual


def test_docstring_tree_lists_exactly_the_classes_and_codes() -> None:
    """The tree in the module docstring names every class it holds with its code, and nothing
    else."""
    expected = sorted((cls.__name__, cls.code) for cls in shared_error_classes())
    actual = sorted((entry.name, entry.code) for entry in documented_tree())
    assert expected == actual


def test_docstring_tree_draws_the_real_parents_and_builtin_bases() -> None:
    """Each entry hangs under its real base class and names the built-ins it subclasses."""
    wrong: list[str] = []
    for entry in documented_tree():
        cls = getattr(errors, entry.name)
        own_bases = [b for b in cls.__bases__ if issubclass(b, PowertrioError)]
        parent = own_bases[0].__name__ if own_bases else None
        if parent != entry.parent:
            wrong.append(f"{entry.name}: drawn under {entry.parent}, subclasses {parent}")
        declared = tuple(b.__name__ for b in cls.__bases__ if not issubclass(b, PowertrioError))
        if cls is not PowertrioError and declared != entry.builtin_bases:  # root: Exception
            wrong.append(f"{entry.name}: drawn with {entry.builtin_bases}, subclasses {declared}")
        for name in entry.builtin_bases:
            if not issubclass(cls, getattr(builtins, name)):
                wrong.append(f"{entry.name}: is no {name}")
    expected: list[str] = []
    assert expected == wrong


def test_every_error_class_is_in_all() -> None:
    """``protocols.errors.__all__`` exports each error class it holds under its own name."""
    classes = shared_error_classes()
    missing = [cls.__name__ for cls in classes if cls.__name__ not in errors.__all__]
    expected: list[str] = []
    assert expected == missing
    for cls in shared_error_classes():
        assert getattr(errors, cls.__name__) is cls


ONLY_THE_AGENTS_RAISE = frozenset(
    {"SessionError", "BoardError", "LimitError", "WorkflowError", "ConsoleTokenRequiredError"}
    | {"FleetFileError", "CronSyntaxError", "FleetAgentNotFoundError", "FleetNodeNotFoundError"}
    | {"McpServerError", "McpToolError", "RemoteSessionError", "RemoteBoardError"}
)
"""Errors (and branches) of features only ``actors`` has: none is ``protocols`` vocabulary."""


def test_the_vocabulary_holds_no_error_only_the_agents_raise() -> None:
    """Sessions', boards', fleets', the limiter's, MCP's, workflows' and the console's errors
    live with their features in ``actors``; ``protocols.errors`` keeps what layers share."""
    misplaced = sorted(
        cls.__name__
        for cls in shared_error_classes()
        if any(base.__name__ in ONLY_THE_AGENTS_RAISE for base in cls.__mro__)
    )
    expected: list[str] = []
    assert expected == misplaced


DOCS_TABLE_ROW = re.compile(r"^\| `(?P<code>[\w.]+)` \| `(?P<name>[\w.]+)` \|")


def test_docs_list_every_code_and_where_its_class_lives() -> None:
    """``docs/api.md`` has one row per error: its code and its public name, nothing stale."""
    text = (Path(__file__).parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split("## Errors and their codes", 1)[1].split("\n## ", 1)[0]
    documented = sorted(
        (match["code"], match["name"])
        for line in section.splitlines()
        if (match := DOCS_TABLE_ROW.match(line)) is not None
    )
    expected = sorted(
        (cls.code, f"{cls.__module__}.{cls.__name__}") for cls in library_error_classes()
    )
    assert expected == documented


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (ConfigError, ValueError),
        (MissingSettingError, ValueError),
        (ActorNotFoundError, LookupError),
        (ActorExistsError, ValueError),
        (AskTimeoutError, TimeoutError),
        (StreamNotFoundError, LookupError),
        (EventEncodeError, TypeError),
        (ToolNotFoundError, LookupError),
        (ToolDefinitionError, TypeError),
    ],
    ids=lambda value: value.__name__,
)
def test_misuse_errors_subclass_the_builtin_they_behave_like(
    cls: type[PowertrioError], builtin: type[Exception]
) -> None:
    """``except LookupError`` catches an unknown actor, as ``except KeyError`` would a dict's."""
    assert issubclass(cls, builtin)
    assert issubclass(cls, PowertrioError)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (ActorNotFoundError("/app/counter"), "no actor is registered as '/app/counter'"),
        (
            AskTimeoutError("counter", "GetCount", 1.5),
            "actor 'counter' did not reply to GetCount within 1.5 s",
        ),
        (
            ConcurrencyConflictError("session-1", 3, 5),
            "stream 'session-1' is at version 5, the append expected 3; nothing was written "
            "(another writer owns this stream?)",
        ),
        (
            ToolNotFoundError("add", ("mul", "sub")),
            "no tool named 'add'; available tools: mul, sub",
        ),
        (ToolNotFoundError("add"), "no tool named 'add'; available tools: none"),
        (
            MissingSettingError("OPENAI_API_KEY"),
            "missing setting: set the environment variable OPENAI_API_KEY",
        ),
        (
            MissingExtraError("powertrio ui", "console", "starlette"),
            "powertrio ui needs the 'console' extra (starlette is not installed): "
            "pip install 'powertrio[console]'",
        ),
        (
            UnknownEventTypeError("session.renamed", "session-1", 4),
            "unknown event type 'session.renamed' at 'session-1' version 4; "
            "is the module that defines it imported?",
        ),
        (
            IntensityExceededError("root", 3, 5.0),
            "supervisor 'root' saw more than 3 restarts within 5 s and gave up; "
            "the last crash is the cause",
        ),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else "",
)
def test_str_is_a_useful_message(error: PowertrioError, message: str) -> None:
    """``str(error)`` names the details and what to do; the exact text is pinned here."""
    assert message == str(error)


def test_structured_fields_carry_the_details() -> None:
    """Callers read fields, never parse the message."""
    timeout = AskTimeoutError("counter", "GetCount", 1.5)
    expected = ("counter", "GetCount", 1.5, "actor.ask_timeout")
    assert expected == (timeout.actor_id, timeout.message_type, timeout.timeout, timeout.code)
    conflict = ConcurrencyConflictError("session-1", 3, 5)
    assert (conflict.stream, conflict.expected, conflict.actual) == ("session-1", 3, 5)
    llm = LLMTimeoutError("read timed out", phase="read", provider="openai")
    assert (llm.phase, llm.provider, llm.status, llm.retryable) == ("read", "openai", None, True)


def test_repr_names_code_and_message() -> None:
    """The repr shows the class, the code and the message."""
    error = ActorNotFoundError("x")
    expected = (
        "ActorNotFoundError(code='actor.not_found', message=\"no actor is registered as 'x'\")"
    )
    assert expected == repr(error)
