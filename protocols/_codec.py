"""The event codec: named, versioned attrs events to and from JSON bytes, with upcasters."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import UnionType
from typing import TYPE_CHECKING, Protocol, TypeVar, Union, final, get_args, get_origin

import attrs
import cattrs
import orjson
from cattrs.fns import identity
from cattrs.preconf.orjson import make_converter as _make_orjson_converter

from ._types import JsonObject, JsonValue
from .errors import (
    EventDecodeError,
    EventEncodeError,
    FutureEventVersionError,
    UnknownEventTypeError,
)

if TYPE_CHECKING:
    from cattrs.dispatch import StructureHook, UnstructureHook

__all__ = [
    "EncodedEvent",
    "EventEncoder",
    "EventRegistry",
    "RecordLike",
    "Upcaster",
    "configure_converter",
    "decode",
    "decode_record",
    "default_registry",
    "encode",
    "event_type",
    "make_converter",
]

T = TypeVar("T")

Upcaster = Callable[[JsonObject], JsonObject]
"""Turns the JSON object of schema version ``n`` into the JSON object of version ``n + 1``."""

_NOT_REGISTERED = "the class is not registered; decorate it with @event_type(...)"

_OPAQUE_ALIASES: tuple[object, ...] = (JsonValue, JsonObject)


def _is_opaque(type_: object) -> bool:
    return any(type_ is alias for alias in _OPAQUE_ALIASES)


def _pass_through(value: object, _type: object = None) -> object:
    return value


def _optional_of(type_: object) -> object | None:
    """``T`` for ``T | None`` (of one ``T``), else ``None``."""
    args: tuple[object, ...] = get_args(type_)
    if len(args) != 2 or type(None) not in args or get_origin(type_) not in _UNIONS:
        return None
    return args[0] if args[1] is type(None) else args[1]


_UNIONS: tuple[object, ...] = (Union, UnionType)


def configure_converter(converter: cattrs.Converter) -> None:
    """Teach a converter to pass ``JsonValue``/``JsonObject`` fields through unwalked, and
    an optional field whose value passes through (``str | None``...) as well.

    Opaque payloads (LLM content, tool arguments) can be large and deeply nested; walking
    them value by value would cost time and gain nothing, since orjson already produced and
    will consume plain JSON values. Both hooks are cattrs' ``identity``, which the code it
    generates for a class reads as "take the attribute as it is": no call per field.

    Args:
        converter (cattrs.Converter): the converter to configure in place.
    """
    converter.register_structure_hook_func(_is_opaque, _pass_through)
    converter.register_unstructure_hook_func(_is_opaque, identity)

    def plain_optional(type_: object) -> bool:
        inner = _optional_of(type_)
        return inner is not None and converter.get_unstructure_hook(inner) is identity

    converter.register_unstructure_hook_func(plain_optional, identity)


def make_converter() -> cattrs.Converter:
    """Build the cattrs converter for the event wire format (orjson preconf plus opaque JSON).

    Returns:
        cattrs.Converter: a new converter; registries usually share the module default.
    """
    converter = _make_orjson_converter()
    configure_converter(converter)
    return converter


@final
@attrs.frozen
class EncodedEvent:
    """An event as the store keeps it: type name, schema version and JSON bytes."""

    type: str
    """The registered event type name, e.g. ``"session.created"``."""
    schema_version: int
    """The schema version of ``data``."""
    data: bytes
    """The event's fields as a JSON object (orjson bytes)."""


class RecordLike(Protocol):
    """Anything shaped like a stored event (``runtime.RecordedEvent`` is one)."""

    @property
    def stream(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def schema_version(self) -> int: ...
    @property
    def data(self) -> bytes: ...


@final
class EventEncoder:
    """How one event class is written: its type name, schema version and a function from
    an instance to its JSON bytes, specialised for the class (cattrs' generated hook, then
    orjson). :meth:`EventRegistry.encoder` makes one per class, once.

    For a writer that builds its own record of an event (an event-sourced actor builds
    the store's), with no :class:`EncodedEvent` in between.
    """

    __slots__ = ("_unstructure", "name", "schema_version")

    def __init__(self, entry: _Entry, unstructure: UnstructureHook) -> None:
        self.name = entry.name
        """The registered type name."""
        self.schema_version = entry.version
        """The schema version :meth:`dump` writes."""
        self._unstructure = unstructure

    def dump(self, event: object) -> bytes:
        """The event's JSON bytes (an instance of this encoder's class).

        Raises:
            EventEncodeError: a field holds a value JSON cannot represent (a set, an
                arbitrary object, a non-string dict key...).
        """
        try:
            return orjson.dumps(self._unstructure(event))
        except (TypeError, ValueError) as exc:
            raise EventEncodeError(
                self.name, f"a field holds a value JSON cannot represent ({exc})"
            ) from exc


@attrs.define(eq=False)
class _Entry:
    cls: type[object]
    name: str
    version: int
    upcasters: Mapping[int, Upcaster]
    # Built on first use, so an event may refer to classes defined later in its module.
    structure: StructureHook | None = None
    encoder: EventEncoder | None = None


@final
@attrs.define(eq=False, repr=False)
class EventRegistry:
    """Maps event classes to stable names and schema versions, and encodes/decodes them.

    One module-level registry (:data:`default_registry`) is what actor modules register
    into at import time; tests may build their own to stay isolated. The registry turns
    events into :class:`EncodedEvent` and back; it never does I/O, and the store never
    sees event classes, only bytes.
    """

    _converter: cattrs.Converter = attrs.field(factory=make_converter)
    _by_name: dict[str, _Entry] = attrs.field(init=False, factory=dict)
    _by_class: dict[type[object], _Entry] = attrs.field(init=False, factory=dict)

    @property
    def converter(self) -> cattrs.Converter:
        """The cattrs converter this registry uses."""
        return self._converter

    def register(
        self,
        cls: type[T],
        *,
        name: str,
        version: int = 1,
        upcasters: Mapping[int, Upcaster] | None = None,
    ) -> type[T]:
        """Register an attrs event class under a stable name and its current schema version.

        Args:
            cls (type): an attrs class; its fields are the event's payload.
            name (str): the stable type name stored with every event, e.g. ``"run.started"``.
                Never rename it; rename the class instead.
            version (int): the current schema version (1 for a new type).
            upcasters (Mapping[int, Upcaster]): ``{n: fn}`` turns the JSON object of
                version ``n`` into version ``n + 1``; every ``n`` in ``1 .. version - 1``
                needs one, so old events stay readable.

        Returns:
            type: ``cls`` unchanged, so this also works as a decorator body.

        Raises:
            TypeError: ``cls`` is not an attrs class.
            ValueError: the name or class is already registered, the version is below 1,
                or the upcasters do not cover exactly ``1 .. version - 1``.
        """
        if not _is_attrs_class(cls):
            raise TypeError(
                f"{cls.__qualname__} is not an attrs class; decorate it with @attrs.frozen"
            )
        if not name or not isinstance(name, str):
            raise ValueError("name must be a non-empty string")
        if version < 1:
            raise ValueError(f"version must be >= 1, got {version}")
        if name in self._by_name:
            other = self._by_name[name].cls.__qualname__
            raise ValueError(f"event type name {name!r} is already registered by {other}")
        if cls in self._by_class:
            raise ValueError(
                f"{cls.__qualname__} is already registered as {self._by_class[cls].name!r}"
            )
        steps = dict(upcasters or {})
        if set(steps) != set(range(1, version)):
            raise ValueError(
                f"event type {name!r} at version {version} needs upcasters for versions "
                f"{list(range(1, version))}, got {sorted(steps)}"
            )
        entry = _Entry(cls=cls, name=name, version=version, upcasters=steps)
        self._by_name[name] = entry
        self._by_class[cls] = entry
        return cls

    def event_type(
        self, name: str, *, version: int = 1, upcasters: Mapping[int, Upcaster] | None = None
    ) -> Callable[[type[T]], type[T]]:
        """Class decorator form of :meth:`register`.

        Args:
            name (str): the stable type name.
            version (int): the current schema version.
            upcasters (Mapping[int, Upcaster]): see :meth:`register`.

        Returns:
            Callable: a decorator registering the class and returning it unchanged.
        """

        def decorate(cls: type[T]) -> type[T]:
            return self.register(cls, name=name, version=version, upcasters=upcasters)

        return decorate

    def name_of(self, cls: type[object]) -> str:
        """The registered type name of an event class.

        Raises:
            EventEncodeError: the class is not registered.
        """
        entry = self._by_class.get(cls)
        if entry is None:
            raise EventEncodeError(cls.__qualname__, _NOT_REGISTERED)
        return entry.name

    def class_of(self, name: str) -> type[object]:
        """The class registered under a type name.

        Raises:
            UnknownEventTypeError: no class is registered under ``name``.
        """
        entry = self._by_name.get(name)
        if entry is None:
            raise UnknownEventTypeError(name)
        return entry.cls

    def current_version(self, name: str) -> int:
        """The schema version this code writes for ``name``.

        Raises:
            UnknownEventTypeError: no class is registered under ``name``.
        """
        entry = self._by_name.get(name)
        if entry is None:
            raise UnknownEventTypeError(name)
        return entry.version

    def names(self) -> tuple[str, ...]:
        """Every registered type name, sorted."""
        return tuple(sorted(self._by_name))

    def encode(self, event: object) -> EncodedEvent:
        """Encode an event to its type name, current schema version and JSON bytes.

        Args:
            event (object): an instance of a registered class.

        Returns:
            EncodedEvent: ready to become a ``runtime.NewEvent``.

        Raises:
            EventEncodeError: the class is not registered, or a field holds a value JSON
                cannot represent (a set, an arbitrary object, a non-string dict key...).
        """
        encoder = self.encoder(type(event))
        return EncodedEvent(
            type=encoder.name, schema_version=encoder.schema_version, data=encoder.dump(event)
        )

    def encoder(self, cls: type[object]) -> EventEncoder:
        """The encoder of an event class, specialised for it on first use and kept.

        Raises:
            EventEncodeError: the class is not registered.
        """
        entry = self._by_class.get(cls)
        if entry is None:
            raise EventEncodeError(cls.__qualname__, _NOT_REGISTERED)
        encoder = entry.encoder
        if encoder is None:
            hook = self._converter.get_unstructure_hook(entry.cls)
            encoder = entry.encoder = EventEncoder(entry, hook)
        return encoder

    def decode(
        self,
        type: str,
        schema_version: int,
        data: bytes,
        *,
        stream: str | None = None,
        version: int | None = None,
    ) -> object:
        """Decode stored bytes into the current event class, upcasting older versions.

        Args:
            type (str): the stored type name.
            schema_version (int): the stored schema version.
            data (bytes): the stored JSON object.
            stream (str | None): the stream it came from, named in errors.
            version (int | None): its version in the stream, named in errors.

        Returns:
            object: an instance of the registered class.

        Raises:
            UnknownEventTypeError: no class is registered under ``type``.
            FutureEventVersionError: ``schema_version`` is newer than the registered one.
            EventDecodeError: the bytes are not a JSON object, an upcaster failed, or the
                object does not fit the class.
        """
        entry = self._by_name.get(type)
        if entry is None:
            raise UnknownEventTypeError(type, stream, version)
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise EventDecodeError(type, f"payload is not JSON ({exc})", stream, version) from exc
        if schema_version != entry.version:
            raw = self._upcast(entry, schema_version, raw, stream, version)
        if not isinstance(raw, dict):
            raise EventDecodeError(
                type, f"payload is a JSON {_json_kind(raw)}, expected an object", stream, version
            )
        structure = entry.structure
        if structure is None:
            structure = entry.structure = self._converter.get_structure_hook(entry.cls)
        try:
            return structure(raw, entry.cls)
        except Exception as exc:
            detail = (
                "; ".join(cattrs.transform_error(exc))
                if isinstance(exc, cattrs.BaseValidationError)
                else f"{exc.__class__.__name__}: {exc}"
            )
            raise EventDecodeError(type, detail, stream, version) from exc

    def decode_record(self, record: RecordLike) -> object:
        """Decode a stored event record; errors name its stream and version.

        Raises:
            UnknownEventTypeError, FutureEventVersionError, EventDecodeError: as :meth:`decode`.
        """
        return self.decode(
            record.type,
            record.schema_version,
            record.data,
            stream=record.stream,
            version=record.version,
        )

    def _upcast(
        self,
        entry: _Entry,
        schema_version: int,
        raw: object,
        stream: str | None,
        version: int | None,
    ) -> object:
        if schema_version > entry.version:
            raise FutureEventVersionError(
                entry.name, schema_version, entry.version, stream, version
            )
        if schema_version < 1:
            raise EventDecodeError(
                entry.name, f"schema version {schema_version} is below 1", stream, version
            )
        for step in range(schema_version, entry.version):
            if not isinstance(raw, dict):
                raise EventDecodeError(
                    entry.name,
                    f"payload is a JSON {_json_kind(raw)}, expected an object",
                    stream,
                    version,
                )
            try:
                raw = entry.upcasters[step](raw)
            except Exception as exc:
                raise EventDecodeError(
                    entry.name,
                    f"upcaster from schema version {step} to {step + 1} failed "
                    f"({exc.__class__.__name__}: {exc})",
                    stream,
                    version,
                ) from exc
        return raw


def _is_attrs_class(cls: object) -> bool:
    # A plain bool, not attrs.has's TypeGuard, so the caller keeps its TypeVar.
    return isinstance(cls, type) and attrs.has(cls)


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number"


default_registry: EventRegistry = EventRegistry()
"""The registry actor modules register their events into at import time."""


def event_type(
    name: str, *, version: int = 1, upcasters: Mapping[int, Upcaster] | None = None
) -> Callable[[type[T]], type[T]]:
    """Register an attrs class in the default registry (class decorator).

    Example::

        @event_type("session.created", version=2, upcasters={1: add_depth})
        @attrs.frozen
        class SessionCreated: ...

    Args:
        name (str): the stable type name stored with every event.
        version (int): the current schema version.
        upcasters (Mapping[int, Upcaster]): ``{n: fn}`` upgrades version ``n`` to ``n + 1``.

    Returns:
        Callable: the decorator.
    """
    return default_registry.event_type(name, version=version, upcasters=upcasters)


def encode(event: object) -> EncodedEvent:
    """Encode an event with the default registry (see :meth:`EventRegistry.encode`)."""
    return default_registry.encode(event)


def decode(
    type: str,
    schema_version: int,
    data: bytes,
    *,
    stream: str | None = None,
    version: int | None = None,
) -> object:
    """Decode with the default registry (see :meth:`EventRegistry.decode`)."""
    return default_registry.decode(type, schema_version, data, stream=stream, version=version)


def decode_record(record: RecordLike) -> object:
    """Decode a stored record with the default registry (see :meth:`EventRegistry.decode`)."""
    return default_registry.decode_record(record)
