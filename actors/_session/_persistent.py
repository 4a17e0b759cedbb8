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

Snapshots: both values encode as chunks of :data:`CHUNK` items (a map's with their keys),
each a JSON text. A full chunk never changes, so its text is cached on the shared buffer
and a snapshot re-encodes only the chunk still filling; a value loaded from a snapshot
decodes a chunk only when an item in it is read, so reopening a session of 50,000
messages decodes none of them until the next model call needs the conversation.

Why not ``pyrsistent`` (a HAMT): a general persistent map costs O(log n) per operation
and a dependency; the fold's maps only ever gain keys (run results, follow-up ids, child
statuses), so an insert-only map over the same shared buffer is O(1), and the chunked
lazy snapshot form needs control of the buffer anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, final, overload

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
E = TypeVar("E")
"""A chunk's encoded form (what the snapshot's codec makes of it: text, bytes, ...)."""

CHUNK = 256
"""Items per encoded chunk of a snapshot."""

_UNLOADED: Any = object()
"""The placeholder of an item whose chunk is not decoded yet."""


_new_object = object.__new__


def _same(a: object, b: object) -> bool:
    return a is b or a == b


class _Buf(list[T]):
    """The buffer the versions of one lineage share, and what is known of its chunks.

    ``memo`` caches each full chunk's encoded form (chunk index -> encoded; valid for
    every version, since a full chunk's items never change); ``lazy`` holds the encoded
    chunks loaded from a snapshot and not decoded yet (their slots hold placeholders).
    """

    __slots__ = ("decode", "lazy", "lazy_count", "memo")

    def __init__(self, items: Iterable[T] = ()) -> None:
        super().__init__(items)
        self.memo: dict[int, Any] = {}
        self.lazy: dict[int, Any] = {}
        self.decode: Callable[[int, Any], list[T]] | None = None
        self.lazy_count = 0

    def fault(self, start: int, stop: int) -> None:
        """Decode the chunks that hold indexes ``start`` to ``stop - 1``, if any are lazy."""
        lazy = self.lazy
        if not lazy or stop <= start:
            return
        for k in range(start // CHUNK, (stop - 1) // CHUNK + 1):
            text = lazy.pop(k, None)
            if text is not None and self.decode is not None:
                items = self.decode(k, text)
                stop_k = min(self.lazy_count, k * CHUNK + CHUNK)
                if len(items) != stop_k - k * CHUNK:
                    lazy[k] = text
                    msg = f"chunk {k} holds {len(items)} items, expected {stop_k - k * CHUNK}"
                    raise ValueError(msg)
                self[k * CHUNK : stop_k] = items

    def own_prefix(self, size: int) -> _Buf[T]:
        """A new buffer holding the first ``size`` items (decoded), sharing the cache."""
        self.fault(0, size)
        own: _Buf[T] = _Buf(self[:size])
        own.memo = {k: t for k, t in self.memo.items() if (k + 1) * CHUNK <= size}
        return own

    def chunk_texts(self, size: int, encode: Callable[[list[T]], E]) -> list[E]:
        """The first ``size`` items encoded in chunks of ``CHUNK`` items (full ones cached)."""
        texts: list[E] = []
        for k in range((size + CHUNK - 1) // CHUNK):
            start, stop = k * CHUNK, min(size, k * CHUNK + CHUNK)
            full = stop - start == CHUNK
            text = self.memo.get(k) if full else None
            if text is None:
                self.fault(start, stop)
                text = encode(self[start:stop])
                if full:
                    self.memo[k] = text
            texts.append(text)
        return texts


def _lazy_buf(
    count: int, texts: Sequence[Any], decode: Callable[[int, Any], list[T]], fill: list[T]
) -> _Buf[T]:
    if len(texts) != (count + CHUNK - 1) // CHUNK:
        msg = f"{len(texts)} chunks cannot hold {count} items"
        raise ValueError(msg)
    buf: _Buf[T] = _Buf(fill)
    buf.decode = decode
    buf.lazy = dict(enumerate(texts))
    buf.lazy_count = count
    buf.memo = {k: t for k, t in enumerate(texts) if (k + 1) * CHUNK <= count}
    return buf


@final
class AppendVector(Generic[T]):
    """An immutable sequence with O(1) amortised :meth:`append`, sharing its buffer.

    Indexing, ``len`` and :attr:`last` are O(1); :meth:`as_tuple` materialises the items
    once per version (cached).
    """

    __slots__ = ("_buf", "_size", "_tuple")

    _buf: _Buf[T]
    _size: int
    _tuple: tuple[T, ...] | None

    def __init__(self, items: Iterable[T] = ()) -> None:
        self._buf = _Buf(items)
        self._size = len(self._buf)
        self._tuple = None

    @classmethod
    def _of(cls, buf: _Buf[T], size: int) -> AppendVector[T]:
        self = object.__new__(cls)
        self._buf = buf
        self._size = size
        self._tuple = None
        return self

    @classmethod
    def from_chunks(
        cls, count: int, texts: Sequence[E], decode: Callable[[E], list[T]]
    ) -> AppendVector[T]:
        """The vector :meth:`chunks` encoded; each chunk is decoded when first read.

        Raises:
            ValueError: ``texts`` has the wrong number of chunks for ``count``.
        """
        buf = _lazy_buf(count, texts, lambda _k, text: decode(text), [_UNLOADED] * count)
        return cls._of(buf, count)

    def chunks(self, encode: Callable[[list[T]], E]) -> list[E]:
        """The items encoded in chunks of :data:`CHUNK` items; full chunks are encoded once."""
        return self._buf.chunk_texts(self._size, encode)

    def append(self, item: T) -> AppendVector[T]:
        """This vector with ``item`` added at the end (``self`` is unchanged)."""
        buf, size = self._buf, self._size
        if len(buf) == size:
            buf.append(item)
        if buf[size] is item:  # the newest version, as in a fold: no call for it
            grown: AppendVector[T] = _new_object(AppendVector)
            grown._buf = buf
            grown._size = size + 1
            grown._tuple = None
            return grown
        if len(buf) > size:
            if buf.lazy:  # (a fold's append never finds the buffer lazy: no call for it)
                buf.fault(size, size + 1)
            if _same(buf[size], item):
                return AppendVector._of(buf, size + 1)
        own = buf.own_prefix(size)  # a branch off an older version: a buffer of its own
        own.append(item)
        return AppendVector._of(own, size + 1)

    def extend(self, items: Iterable[T]) -> AppendVector[T]:
        """This vector with ``items`` added at the end, in order."""
        vector = self
        for item in items:
            vector = vector.append(item)
        return vector

    def window(self, start: int = 0) -> tuple[list[T], int, int, Callable[[int, int], None]]:
        """``(buffer, start, stop, load)``: the items ``start`` to the end, shared, not copied.

        ``buffer[start:stop]`` never changes (later versions append past ``stop``); call
        ``load(i, j)`` before reading items ``i`` to ``j - 1`` (they may be undecoded).
        """
        if not 0 <= start <= self._size:
            msg = f"start {start} is outside a vector of {self._size}"
            raise IndexError(msg)
        return self._buf, start, self._size, self._buf.fault

    def as_tuple(self) -> tuple[T, ...]:
        """The items as a tuple (built once per version, O(n))."""
        cached = self._tuple
        if cached is None:
            buf, size = self._buf, self._size
            buf.fault(0, size)
            # A plain list's slice, then its tuple: two copies of pointers, three times
            # faster than iterating the list subclass.
            cached = tuple(list.__getitem__(buf, slice(0, size)))
            self._tuple = cached
        return cached

    @property
    def last(self) -> T | None:
        """The last item, or ``None`` when empty."""
        size = self._size
        if not size:
            return None
        buf = self._buf
        if buf.lazy:
            buf.fault(size - 1, size)
        return buf[size - 1]

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
        buf = self._buf
        if buf.lazy:
            buf.fault(index, index + 1)
        return buf[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self.as_tuple())

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

    _entries: _Buf[tuple[K, V]]
    _index: dict[K, int]
    _size: int

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        merged: dict[K, V] = dict(pairs)
        self._entries = _Buf(merged.items())
        self._index = {key: i for i, key in enumerate(merged)}
        self._size = len(self._entries)

    @classmethod
    def _of(cls, entries: _Buf[tuple[K, V]], index: dict[K, int], size: int) -> GrowMap[K, V]:
        self = object.__new__(cls)
        self._entries = entries
        self._index = index
        self._size = size
        return self

    @classmethod
    def from_chunks(
        cls,
        texts: Sequence[E],
        keys_of: Callable[[E], list[K]],
        decode: Callable[[E], list[V]],
    ) -> GrowMap[K, V]:
        """The map :meth:`chunks` encoded: keys at once (``keys_of`` each text), values
        (``decode``) when first read.

        Raises:
            ValueError: repeated keys, or a chunk other than the last with fewer than
                :data:`CHUNK` keys.
        """
        keys: list[K] = []
        for k, text in enumerate(texts):
            part = keys_of(text)
            if not 0 < len(part) <= CHUNK or (len(part) < CHUNK and k < len(texts) - 1):
                msg = f"chunk {k} of {len(texts)} holds {len(part)} keys"
                raise ValueError(msg)
            keys.extend(part)
        index = {key: i for i, key in enumerate(keys)}
        if len(index) != len(keys):
            raise ValueError("the keys of a map repeat")

        def pairs(k: int, text: E) -> list[tuple[K, V]]:
            return list(zip(keys[k * CHUNK : k * CHUNK + CHUNK], decode(text), strict=True))

        entries = _lazy_buf(len(keys), texts, pairs, [(key, _UNLOADED) for key in keys])
        return cls._of(entries, index, len(keys))

    def chunks(self, encode: Callable[[list[K], list[V]], E]) -> list[E]:
        """The entries encoded in chunks of :data:`CHUNK` keys and their values (``encode(keys,
        values)``); a full chunk is encoded once, so a snapshot costs the chunk still
        filling, however many keys the map holds."""

        def encode_pairs(pairs: list[tuple[K, V]]) -> E:
            return encode([key for key, _ in pairs], [value for _, value in pairs])

        return self._entries.chunk_texts(self._size, encode_pairs)

    def set(self, key: K, value: V) -> GrowMap[K, V]:
        """This map with ``key`` mapped to ``value`` (``self`` is unchanged)."""
        entries, index, size = self._entries, self._index, self._size
        at = index.get(key)
        if at is not None and at < size:  # present in this version
            if _same(self[key], value):
                return self
            return GrowMap({**dict(self.items()), key: value})
        entry = (key, value)
        if len(entries) == size and at is None:
            entries.append(entry)
            index[key] = size
        if len(entries) > size and index.get(key) == size:
            if entries.lazy:
                entries.fault(size, size + 1)
            if _same(entries[size][1], value):
                return GrowMap._of(entries, index, size + 1)
        own = entries.own_prefix(size)  # a branch off an older version
        own.append(entry)
        own_index = {k: i for i, (k, _) in enumerate(own)}
        return GrowMap._of(own, own_index, size + 1)

    def __getitem__(self, key: K) -> V:
        at = self._index.get(key)
        if at is None or at >= self._size:
            raise KeyError(key)
        entries = self._entries
        if entries.lazy:
            entries.fault(at, at + 1)
        return entries[at][1]

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, /, default: V | T) -> V | T: ...
    def get(self, key: K, /, default: object = None) -> object:
        # Mapping's own would raise and catch a KeyError for a missing key: a send asks
        # for its run's result before the run has one.
        at = self._index.get(key)
        if at is None or at >= self._size:
            return default
        entries = self._entries
        if entries.lazy:
            entries.fault(at, at + 1)
        return entries[at][1]

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
