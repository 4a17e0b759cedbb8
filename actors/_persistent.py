"""Immutable sequences and maps that grow in O(1) amortised time: the session fold's values.

A session's state grows one event at a time for months. Copying a tuple or a dict per
event makes the fold quadratic (folding 40,000 messages took seconds). These two values
share one append-only buffer between all the versions of one lineage instead:

* a version is ``(buffer, size)`` and sees ``buffer[:size]``, a prefix nobody ever mutates;
* growing the newest version appends to the shared buffer in place (O(1));
* growing an older version (a branch: a preview of an evolve, a replay) finds the buffer
  already longer; if the next item there is the same, the branch shares it, otherwise it
  copies its prefix into a buffer of its own (O(n) once, then O(1) again).

This is the "fat node" trick of Clojure's transients without the transient: the values
stay immutable for every reader, and a fold, which only ever extends its newest version,
never copies. The check-then-append is safe under the GIL too: an append that lost a race
sees someone else's item at its index and copies.

Why not ``pyrsistent`` (a HAMT): a general persistent map costs O(log n) per operation
and a dependency; the fold's maps only ever gain keys (run results, follow-up ids, child
statuses), so an insert-only map over the same shared buffer is O(1) and 150 lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar, final, overload

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


def _same(a: object, b: object) -> bool:
    return a is b or a == b


@final
class AppendVector(Generic[T]):
    """An immutable sequence with O(1) amortised :meth:`append`, sharing its buffer.

    Indexing, ``len`` and :attr:`last` are O(1); :meth:`as_tuple` materialises the items
    once per version (cached).
    """

    __slots__ = ("_buf", "_size", "_tuple")

    _buf: list[T]
    _size: int
    _tuple: tuple[T, ...] | None

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._buf = list(items)
        self._size = len(self._buf)
        self._tuple = None

    @classmethod
    def _of(cls, buf: list[T], size: int) -> AppendVector[T]:
        self = object.__new__(cls)
        self._buf = buf
        self._size = size
        self._tuple = None
        return self

    def append(self, item: T) -> AppendVector[T]:
        """This vector with ``item`` added at the end (``self`` is unchanged)."""
        buf, size = self._buf, self._size
        if len(buf) == size:
            buf.append(item)
        if len(buf) > size and _same(buf[size], item):
            return AppendVector._of(buf, size + 1)
        # A branch off an older version: take a buffer of our own.
        own = buf[:size]
        own.append(item)
        return AppendVector._of(own, size + 1)

    def extend(self, items: Iterable[T]) -> AppendVector[T]:
        """This vector with ``items`` added at the end, in order."""
        vector = self
        for item in items:
            vector = vector.append(item)
        return vector

    def as_tuple(self) -> tuple[T, ...]:
        """The items as a tuple (built once per version, O(n))."""
        cached = self._tuple
        if cached is None:
            buf = self._buf
            cached = tuple(buf) if len(buf) == self._size else tuple(buf[: self._size])
            self._tuple = cached
        return cached

    @property
    def last(self) -> T | None:
        """The last item, or ``None`` when empty."""
        return self._buf[self._size - 1] if self._size else None

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...
    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return self.as_tuple()[index]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("AppendVector index out of range")
        return self._buf[index]

    def __iter__(self) -> Iterator[T]:
        buf = self._buf
        for i in range(self._size):
            yield buf[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AppendVector):
            return NotImplemented
        if self._size != other._size:
            return False
        if self._buf is other._buf:
            return True
        return self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return f"AppendVector({list(self)!r})"


@final
class GrowMap(Mapping[K, V]):
    """An immutable mapping with O(1) amortised :meth:`set` for new keys.

    Entries live in a shared append-only list (insertion order) with a shared index of
    each key's position; a version sees the entries below its size. Setting a key that
    is already present to another value copies (O(n)): the fold never does it.
    """

    __slots__ = ("_entries", "_index", "_size")

    _entries: list[tuple[K, V]]
    _index: dict[K, int]
    _size: int

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        merged: dict[K, V] = dict(pairs)
        self._entries = list(merged.items())
        self._index = {key: i for i, (key, _) in enumerate(self._entries)}
        self._size = len(self._entries)

    @classmethod
    def _of(cls, entries: list[tuple[K, V]], index: dict[K, int], size: int) -> GrowMap[K, V]:
        self = object.__new__(cls)
        self._entries = entries
        self._index = index
        self._size = size
        return self

    def set(self, key: K, value: V) -> GrowMap[K, V]:
        """This map with ``key`` mapped to ``value`` (``self`` is unchanged)."""
        entries, index, size = self._entries, self._index, self._size
        at = index.get(key)
        if at is not None and at < size:  # present in this version
            if _same(entries[at][1], value):
                return self
            return GrowMap({**dict(self.items()), key: value})
        entry = (key, value)
        if len(entries) == size and at is None:
            entries.append(entry)
            index[key] = size
        if len(entries) > size and index.get(key) == size and _same(entries[size][1], value):
            return GrowMap._of(entries, index, size + 1)
        own = GrowMap(entries[:size])  # a branch off an older version
        own._entries.append(entry)
        own._index[key] = size
        own._size = size + 1
        return own

    def __getitem__(self, key: K) -> V:
        at = self._index.get(key)
        if at is None or at >= self._size:
            raise KeyError(key)
        return self._entries[at][1]

    def __contains__(self, key: object) -> bool:
        at = self._index.get(key)  # type: ignore[arg-type]  # any hashable key
        return at is not None and at < self._size

    def __iter__(self) -> Iterator[K]:
        entries = self._entries
        for i in range(self._size):
            yield entries[i][0]

    def __len__(self) -> int:
        return self._size

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GrowMap) and other._entries is self._entries:
            return other._size == self._size
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"GrowMap({dict(self.items())!r})"


def grow_map(mapping: Mapping[Any, Any]) -> GrowMap[Any, Any]:
    """``mapping`` as a :class:`GrowMap` (itself if it is one): an attrs converter."""
    return mapping if isinstance(mapping, GrowMap) else GrowMap(mapping)
