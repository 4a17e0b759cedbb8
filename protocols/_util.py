"""Small helpers shared by the three packages."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

import attrs
import trio

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class _PackageNames(dict[str, object]):
    """A top-level package's public names, looked up (and so loaded) one at a time.

    A namespace such as ``runtime.supervision`` re-exports a class whose hints name a class
    of the package's top (``ChildSpec`` names ``Actor``, imported for hints only): the
    hint resolves there, without the namespace holding that name. Given as the locals of
    the hints' evaluation, which reads a mapping through ``__getitem__``.
    """

    def __init__(self, package: str) -> None:
        super().__init__()
        self._package = package

    def __missing__(self, name: str) -> object:
        try:
            return getattr(sys.modules[self._package], name)
        except (AttributeError, KeyError):
            raise KeyError(name) from None


def fixup_module_metadata(module_name: str, namespace: dict[str, object]) -> None:
    """Make re-exported names report the public module, so reprs and docs say ``runtime.Runtime``.

    Trio does the same in ``trio._util``: tracebacks and docs then name the public module,
    not the private file a class happens to live in.

    String annotations (``from __future__ import annotations``) are resolved against a
    class's module, so attrs classes get their field types resolved first, while their
    original module is still the one that defines the names; a class whose annotations
    cannot be resolved yet keeps its module.
    """
    package = module_name.split(".", maxsplit=1)[0]
    for name, obj in namespace.items():
        if name.startswith("_") or not (isinstance(obj, type) or callable(obj)):
            continue
        current = getattr(obj, "__module__", None)
        if not (isinstance(current, str) and current.split(".")[0] == package and "._" in current):
            continue
        if isinstance(obj, type) and attrs.has(obj):
            # A hint-only import (under TYPE_CHECKING, e.g. to break an import cycle) is
            # missing from the defining module but often re-exported by the package.
            defining = vars(sys.modules[current]) if current in sys.modules else {}
            try:
                attrs.resolve_types(
                    obj, globalns={**namespace, **defining}, localns=_PackageNames(package)
                )
            except NameError:
                continue
        try:
            obj.__module__ = module_name
        except (AttributeError, TypeError):  # builtins and slotted callables refuse
            continue


_MISSING = object()


def lazy_exports(
    module_name: str, exports: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` (PEP 562) of a module that re-exports, from each
    module (relative to its package, e.g. ``"._agents"``), the names listed for it.

    Importing the module then loads none of them: ``powertrio --help`` and a program that
    uses a few names load only what those names need. A name is bound in the module on
    first access, so later lookups are plain attribute reads. Every export of a module
    loaded by then is bound and fixed up with it (:func:`fixup_module_metadata`), so a
    class reached through another name, such as the ``Session`` that ``spawn_session``
    returns, reports the public module too, as it would have after an eager import.
    Type checkers read the same names from imports under ``TYPE_CHECKING``.
    """
    namespace = vars(sys.modules[module_name])
    package = str(namespace["__package__"])
    sources = {importlib.util.resolve_name(m, package): names for m, names in exports.items()}
    home = {name: module for module, names in sources.items() for name in names}

    def __getattr__(name: str) -> object:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        for source, names in sources.items():
            loaded = sys.modules.get(source)
            if loaded is None:
                continue
            for other in names:
                # A module still being imported lacks its later names: they bind next time.
                found = getattr(loaded, other, _MISSING)
                if other not in namespace and found is not _MISSING:
                    namespace[other] = found
        fixup_module_metadata(module_name, dict(namespace))  # a copy: it may import
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *home})

    return __getattr__, __dir__


@contextmanager
def unwrap_single_error() -> Iterator[None]:
    """Let one error out of a block that runs a nursery bare, as users of Trio libraries expect.

    A nursery wraps whatever escapes it in an ``ExceptionGroup``, even a single error raised
    by the body of a context manager built on one. Inside this block a group whose only real
    error (cancellations aside) is one exception re-raises that exception, with its own
    traceback, cause and context; a group of several concurrent failures stays a group.
    Peeling stops at the first level with more than one error, so a group the body raised
    itself comes out as it was raised.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        error = _sole_error(group)
        if error is None:
            raise
        # Raising inside the handler would make the group the error's context: keep its own.
        context, suppress = error.__context__, error.__suppress_context__
        try:
            raise error
        finally:
            error.__context__ = context
            error.__suppress_context__ = suppress
            del error, context


def _sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """What ``group`` wraps once nursery wrappers of a single error are peeled off."""
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup):
        real = [e for e in found.exceptions if _is_real(e)]
        if len(real) != 1:
            return None if found is group else found
        found = real[0]
    return found


def _is_real(exc: BaseException) -> bool:
    """Not a cancellation (nor a group holding only cancellations)."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_real(e) for e in exc.exceptions)
    return not isinstance(exc, trio.Cancelled)


def slot_setter(cls: type[T], name: str) -> Callable[[T, object], None]:
    """The setter of field ``name``'s slot in the slotted class ``cls``, past a frozen
    class's guard.

    For building a frozen attrs value on a hot path: ``object.__new__(cls)``, then each
    field through its setter, is the same object as ``cls(...)`` at about half the cost
    (``__init__`` goes through the frozen ``__setattr__`` for every field). Every field
    must be set, or reading it raises ``AttributeError``; a test should compare the result
    with one ``__init__`` built.

    Raises:
        KeyError: ``cls`` has no slot ``name``.
    """
    setter: Callable[[T, object], None] = cls.__dict__[name].__set__
    return setter


def cache_by_identity(fn: Callable[[K], V]) -> Callable[[K], V]:
    """``fn`` with its result kept per argument object, by identity, for the latest 256.

    For an argument offered again and again as the same object and costly to hash by
    value, such as a session's tuple of tools at every model call. An entry holds its
    argument, so the argument's ``id`` is not reused while the entry is kept; past 256
    arguments the cache starts afresh.
    """
    cache: dict[int, tuple[K, V]] = {}

    @functools.wraps(fn)
    def cached(key: K) -> V:
        hit = cache.get(id(key))
        if hit is not None and hit[0] is key:
            return hit[1]
        value = fn(key)
        if len(cache) >= 256:
            cache.clear()
        cache[id(key)] = (key, value)
        return value

    return cached
