"""The shape of the public API: exports, ``__all__``, ``__module__``, finality, lazy test kit.

Modelled on Trio's ``_tests/test_exports.py`` and httpx's ``tests/test_exported_members.py``.
"""

from __future__ import annotations
import __future__

import abc
import ast
import collections.abc
import importlib
import inspect
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

PUBLIC_MODULES = (
    "protocols",
    "protocols.codec",
    "protocols.errors",
    "protocols.jsonschema",
    "protocols.lowlevel",
    "protocols.streaming",
    "protocols.transports",
    "runtime",
    "runtime.cluster",
    "runtime.lowlevel",
    "runtime.maintenance",
    "runtime.postgres",
    "runtime.supervision",
    "runtime.testing",
    "runtime.timers",
    "actors",
    "actors.board",
    "actors.cluster",
    "actors.events",
    "actors.fleet",
    "actors.limits",
    "actors.lowlevel",
    "actors.mcp",
    "actors.observe",
    "actors.testing",
    "actors.telemetry",
    "actors.cli",
    "actors.console",
    "actors.workflows",
)
"""Every module users import from; everything else is a private ``_module``."""

ROOTS = frozenset(name.split(".")[0] for name in PUBLIC_MODULES)

MEANT_TO_BE_SUBCLASSED: dict[str, str] = {
    "runtime.Actor": "the base class every actor subclasses",
    "runtime.EventSourcedActor": "the base class of event-sourced actors (the session actor)",
    "runtime.Supervisor": "an actor whose subclasses declare their children",
    "runtime.Request": "marker base: a message subclasses Request[R] to type its reply",
    "runtime.PriorityMessage": (
        "marker base for messages on the priority lane (called SystemMessage in the "
        "first draft; renamed because protocols.SystemMessage is the LLM role)"
    ),
    "protocols.transports.Transport": (
        "httpx-style base class: each provider transport subclasses it (rule of thumb 8)"
    ),
}
"""Public concrete classes exempt from ``@final``, each with the reason."""

NOT_FINAL_YET: dict[str, str] = {}
"""Known defects left to the owner of the file: expected to fail until fixed (strict)."""


def _is_foreign(name: str, obj: object) -> bool:
    """Whether ``name`` is a by-product of an import rather than part of the API."""
    if isinstance(obj, __future__._Feature):  # `from __future__ import annotations`
        return True
    if isinstance(obj, types.ModuleType):
        return obj.__name__.split(".")[0] not in ROOTS
    return any(getattr(home, name, None) is obj for home in (typing, collections.abc))


def public_names(module_name: str) -> list[str]:
    """The sorted public names of a module, without leftovers of its own imports.

    Read through ``dir()``: a package that loads its names on first use (PEP 562) lists
    them in its ``__dir__`` before anything touched them.
    """
    module = importlib.import_module(module_name)
    return sorted(
        name
        for name in dir(module)
        if not name.startswith("_") and not _is_foreign(name, getattr(module, name))
    )


def public_objects(module_name: str) -> list[tuple[str, object]]:
    """The public classes and functions of a module that powertrio itself defines."""
    module = importlib.import_module(module_name)
    found: list[tuple[str, object]] = []
    for name in public_names(module_name):
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases, constants and submodules carry no __module__ of ours
        if str(getattr(obj, "__module__", "")).split(".")[0] in ROOTS:
            found.append((name, obj))
    return found


def _is_exempt_by_kind(cls: type) -> bool:
    """Protocols, ABCs and exceptions are meant to be subclassed (as in Trio's test)."""
    return (
        bool(getattr(cls, "_is_protocol", False))
        or isinstance(cls, abc.ABCMeta)
        or issubclass(cls, BaseException)
    )


def _concrete_classes() -> list[object]:
    """One pytest param per public concrete class, marked xfail where a defect is known."""
    params: list[object] = []
    seen: set[str] = set()
    for module_name in PUBLIC_MODULES:
        for name, obj in public_objects(module_name):
            qualified = f"{module_name}.{name}"
            if not inspect.isclass(obj) or _is_exempt_by_kind(obj) or qualified in seen:
                continue
            seen.add(qualified)
            if qualified in MEANT_TO_BE_SUBCLASSED:
                continue
            marks = (
                [pytest.mark.xfail(strict=True, reason=NOT_FINAL_YET[qualified])]
                if qualified in NOT_FINAL_YET
                else []
            )
            params.append(pytest.param(obj, id=qualified, marks=marks))
    return params


def _package_inits() -> list[str]:
    """The public modules that are packages, i.e. pure re-export ``__init__`` files."""
    return [name for name in PUBLIC_MODULES if hasattr(importlib.import_module(name), "__path__")]


def _modules_with_all() -> list[str]:
    return [name for name in PUBLIC_MODULES if hasattr(importlib.import_module(name), "__all__")]


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_is_importable(module_name: str) -> None:
    """``from <module> import <name>`` works for every public name, and yields the same object."""
    module = importlib.import_module(module_name)
    names = public_names(module_name)
    assert names, f"{module_name} exports nothing"
    for name in names:
        namespace: dict[str, object] = {}
        exec(f"from {module_name} import {name}", namespace)
        assert getattr(module, name) is namespace[name]


@pytest.mark.parametrize("module_name", _package_inits())
def test_package_init_only_reexports_explicitly(module_name: str) -> None:
    """An ``__init__`` re-exports with ``import X as X`` (so type checkers see the export),
    and the names it imports are exactly the public names found at run time."""
    module = importlib.import_module(module_name)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    implicit: list[str] = []
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                bound = alias.asname or alias.name
                if bound.startswith("_"):
                    continue
                imported.add(bound)
                if alias.asname != alias.name:
                    implicit.append(alias.name)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            implicit.append(node.name)  # an __init__ defines nothing itself
    no_implicit: list[str] = []
    assert no_implicit == implicit
    # Importing a subpackage (runtime.testing) binds it on its parent; that is no export.
    exported = [
        name
        for name in public_names(module_name)
        if name in imported or not isinstance(getattr(module, name), types.ModuleType)
    ]
    assert sorted(imported) == exported


@pytest.mark.parametrize("module_name", _modules_with_all())
def test_all_equals_sorted_public_names(module_name: str) -> None:
    """Where a public module declares ``__all__``, it is sorted and lists every public name."""
    module = importlib.import_module(module_name)
    declared = list(module.__all__)
    assert sorted(declared) == declared
    assert public_names(module_name) == declared


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_exports_report_a_public_module(module_name: str) -> None:
    """Re-exported classes and functions name a public module in ``__module__``.

    The packages call ``fixup_module_metadata`` so reprs, tracebacks and pickles say
    ``runtime.Runtime``, not ``runtime._runtime.Runtime``. The module named must be public
    and really export the object under its ``__name__``.
    """
    wrong: list[str] = []
    for name, obj in public_objects(module_name):
        reported = str(getattr(obj, "__module__", ""))
        home = importlib.import_module(reported)
        if "._" in reported or getattr(home, getattr(obj, "__name__", name), None) is not obj:
            wrong.append(f"{module_name}.{name} reports {reported}")
    none_wrong: list[str] = []
    assert none_wrong == wrong


def test_private_definitions_report_the_package_that_exports_them() -> None:
    """A name defined in a private module reports the package re-exporting it, e.g. ``runtime``."""
    import protocols
    import runtime

    expected = ("runtime", "protocols", "protocols.errors")
    actual = (
        runtime.Runtime.__module__,
        protocols.ToolSpec.__module__,
        protocols.PowertrioError.__module__,
    )
    assert expected == actual


@pytest.mark.parametrize("cls", _concrete_classes())
def test_public_concrete_classes_are_final(cls: type) -> None:
    """Every public concrete class is ``@typing.final`` (Protocols, ABCs, exceptions and the
    listed base classes excepted)."""
    assert getattr(cls, "__final__", False) is True


@pytest.mark.parametrize("qualified", sorted(MEANT_TO_BE_SUBCLASSED))
def test_subclassing_exemptions_are_current(qualified: str) -> None:
    """Every exemption names a public, concrete, non-final class: a stale entry fails."""
    module_name, _, name = qualified.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    assert inspect.isclass(cls)
    assert not _is_exempt_by_kind(cls)
    assert getattr(cls, "__final__", False) is False


def test_all_error_classes_are_exempt_from_final_by_kind() -> None:
    """Exceptions are exempt from ``@final`` because the error tree is built by subclassing."""
    from protocols.errors import LLMBadRequestError, LLMContextOverflowError

    assert issubclass(LLMContextOverflowError, LLMBadRequestError)
    assert _is_exempt_by_kind(LLMBadRequestError)


@pytest.mark.parametrize("module_name", ["protocols", "runtime", "actors"])
def test_importing_a_package_does_not_load_the_test_kits_or_the_cli(module_name: str) -> None:
    """``import runtime`` (or a package built on it) leaves the test kits, the CLI and the
    benchmarks unloaded.

    Runs in a fresh interpreter, because this test session has long imported the kits.
    """
    unwanted = [
        "runtime.testing",
        "actors.testing",
        "actors.cli",
        "runtime.bench",
        "actors.telemetry",
    ]
    code = f"import sys, {module_name}; print([m for m in {unwanted!r} if m in sys.modules])"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = "[]"
    assert loaded == result.stdout.strip()


EVERYDAY_LIMIT = 40
"""At most this many names at the top of a package: the everyday ones (as ``trio`` keeps
``trio.lowlevel`` and ``trio.testing`` apart); operations live in named namespaces."""

TIERED = ("protocols", "runtime", "actors")
"""The top-level packages whose surface is split into tiers."""


@pytest.mark.parametrize("package", TIERED)
def test_a_top_level_package_exports_the_everyday_names_only(package: str) -> None:
    """``import actors`` (or ``runtime``, ``protocols``) shows at most forty names."""
    module = importlib.import_module(package)
    names = [
        name
        for name in public_names(package)
        if not isinstance(getattr(module, name), types.ModuleType)
    ]
    assert len(names) <= EVERYDAY_LIMIT, names


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_exported_name_resolves(module_name: str) -> None:
    """Each name a namespace declares (``__all__``, or ``dir()`` of a lazy package) is
    really there: a stale entry left behind by a move fails here, not in a user's import."""
    module = importlib.import_module(module_name)
    declared = list(getattr(module, "__all__", public_names(module_name)))
    missing = [name for name in declared if not hasattr(module, name)]
    expected: list[str] = []
    assert expected == missing


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_namespace_says_what_lives_there(module_name: str) -> None:
    """Each public module opens with a docstring: the rule for what belongs in it."""
    doc = importlib.import_module(module_name).__doc__ or ""
    assert len(doc.strip()) > 40, module_name


PINNED = Path(__file__).parent / "data" / "public_api.txt"
"""Every public name, one ``module name`` a line: a change to the API is a change here."""


def test_the_public_names_are_the_pinned_ones() -> None:
    """The names each public namespace exports are exactly those listed in the pinned file.

    A name added, moved or removed must be deliberate: update ``tests/data/public_api.txt``
    in the same change (``python tests/test_exports.py`` prints the current list).
    """
    pinned = PINNED.read_text(encoding="utf-8").splitlines()
    assert _current_api() == pinned


def _current_api() -> list[str]:
    # Submodules are pinned as modules (PUBLIC_MODULES), not as names of their parent,
    # which a package holds only once something imported them.
    return [
        f"{module} {name}"
        for module in PUBLIC_MODULES
        for name in public_names(module)
        if not isinstance(getattr(importlib.import_module(module), name), types.ModuleType)
    ]


if __name__ == "__main__":  # print the current list, to pin it
    print("\n".join(_current_api()))
