"""``attrs.evolve`` for the fold's hot classes, at half its cost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from protocols.lowlevel import slot_setter

T = TypeVar("T")

_UNCHANGED: Any = object()


def replacer(cls: type[T]) -> Callable[..., T]:
    """A function ``replace(instance, **changes)`` equal to ``attrs.evolve`` for ``cls``.

    The fold makes a new state per event, and ``attrs.evolve`` spends most of its time
    finding out what to copy: it walks the class's fields, builds a dict of keyword
    arguments and calls ``__init__``. The function made here is written for ``cls`` once:
    one keyword-only parameter per field (an unknown name is a ``TypeError``, as with
    ``evolve``), each slot copied or replaced, the field's converter applied to a new
    value, so it makes the instance ``evolve`` makes.

    Raises:
        TypeError: ``cls`` is not a frozen, slotted attrs class whose fields are all set by
            ``__init__`` with no validator, no ``Converter`` object, no
            ``__attrs_post_init__`` and no cached hash: what ``evolve`` would run besides
            copying the fields could not be skipped.
    """
    fields = _plain_fields(cls, "evolve does more than copy its fields")
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_unchanged": _UNCHANGED}
    lines = [
        "def replace(_self_, *, " + ", ".join(f"{f.name}=_unchanged" for f in fields) + "):",
        "    _made_ = _new(_cls)",
    ]
    for f in fields:
        new = f.name
        if f.converter is not None:
            namespace[f"_convert_{f.name}"] = f.converter
            new = f"_convert_{f.name}({f.name})"
        # Each slot's own setter: past the frozen guard, and no lookup of the name.
        namespace[f"_set_{f.name}"] = slot_setter(cls, f.name)
        lines.append(
            f"    _set_{f.name}(_made_, _self_.{f.name} if {f.name} is _unchanged else {new})"
        )
    lines.append("    return _made_")
    exec("\n".join(lines), namespace)  # code written from the field names
    replace: Callable[..., T] = namespace["replace"]
    replace.__qualname__ = f"replacer({cls.__qualname__})"
    return replace


def maker(cls: type[T]) -> Callable[..., T]:
    """A function ``make(**fields)`` equal to ``cls(**fields)``, at half its cost.

    A frozen class's ``__init__`` sets each field through the frozen ``__setattr__``
    guard; a send makes a dozen events and steps, each of some ten fields. The function
    made here takes the same arguments (positional where ``__init__`` takes them so,
    keyword-only where it does, the same defaults), applies each field's converter as
    ``__init__`` does (defaults too) and sets each slot through its own setter.

    Raises:
        TypeError: ``cls`` is not a frozen, slotted attrs class whose fields are all set by
            ``__init__`` with no validator, no ``Converter`` object, no
            ``__attrs_post_init__`` and no cached hash.
    """
    fields = _plain_fields(cls, "__init__ does more than set its fields")
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_unset": _UNCHANGED}
    positional: list[str] = []
    keywords: list[str] = []
    body = ["    _made_ = _new(_cls)"]
    for f in fields:
        name = f.name
        arg = f.alias or name  # the parameter's name (a private field's has no "_")
        value = arg
        default: Any = f.default
        if default is attrs.NOTHING:
            param = arg
        elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            if default.takes_self:
                raise TypeError(f"{cls.__qualname__}.{name}: a default that takes self")
            namespace[f"_factory_{name}"] = default.factory
            param = f"{arg}=_unset"
            value = f"_factory_{name}() if {arg} is _unset else {arg}"
        else:
            namespace[f"_default_{name}"] = default
            param = f"{arg}=_default_{name}"
        if f.converter is not None:
            namespace[f"_convert_{name}"] = f.converter
            value = f"_convert_{name}({value})"
        (keywords if f.kw_only else positional).append(param)
        namespace[f"_set_{name}"] = slot_setter(cls, name)
        body.append(f"    _set_{name}(_made_, {value})")
    params = [*positional, *(["*", *keywords] if keywords else [])]
    lines = ["def make(" + ", ".join(params) + "):", *body, "    return _made_"]
    exec("\n".join(lines), namespace)  # code written from the field names
    make: Callable[..., T] = namespace["make"]
    make.__qualname__ = f"maker({cls.__qualname__})"
    return make


def _plain_fields(cls: type[Any], refusal: str) -> tuple[attrs.Attribute[Any], ...]:
    """The fields of ``cls`` if ``__init__`` does nothing but set them (converted), else
    a ``TypeError`` saying ``refusal``."""
    if not attrs.has(cls) or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__qualname__} is not a slotted attrs class")
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(cls)
    if (
        getattr(cls, "__attrs_post_init__", None) is not None
        or "_attrs_cached_hash" in vars(cls)["__slots__"]
        or cls.__setattr__ is object.__setattr__  # not frozen
        or any(
            not f.init or f.validator is not None or isinstance(f.converter, attrs.Converter)
            for f in fields
        )
    ):
        raise TypeError(f"{cls.__qualname__}: {refusal}")
    return fields
