"""A request's messages without copying the conversation: an immutable window on a list.

A session of 50,000 messages builds a request per model call. Copying its conversation
into a tuple each time makes every send cost O(history). A :class:`MessageView` holds the
leading messages (the system prompt, a summary) and a window ``[start, stop)`` of a list
whose items below ``stop`` never change (the session transcript's append-only buffer), so
building it is O(1) and reading it walks only what the reader walks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, final, overload

if TYPE_CHECKING:
    from ._llm import Message

__all__ = ["MessageView"]


@final
class MessageView(Sequence["Message"]):
    """``(*lead, *items[start:stop])`` as an immutable sequence, built in O(1).

    The owner of ``items`` promises that ``items[start:stop]`` never changes (it may
    append past ``stop``). ``load(i, j)``, if given, is called before items ``i`` to
    ``j - 1`` are read (a transcript loaded from a snapshot decodes its chunks then).

    It compares equal to a tuple (or another view) of the same messages and hashes like
    one, so a request holding a view equals the same request holding a tuple. Slices are
    views too.
    """

    __slots__ = ("_items", "_lead", "_load", "_start", "_stop")

    _lead: tuple[Message, ...]
    _items: list[Any]
    _start: int
    _stop: int
    _load: Callable[[int, int], None] | None

    def __init__(
        self,
        items: list[Any],
        start: int = 0,
        stop: int | None = None,
        *,
        lead: Sequence[Message] = (),
        load: Callable[[int, int], None] | None = None,
    ) -> None:
        stop = len(items) if stop is None else stop
        if not 0 <= start <= stop <= len(items):
            msg = f"window [{start}, {stop}) is outside a list of {len(items)}"
            raise ValueError(msg)
        self._lead = tuple(lead)
        self._items = items
        self._start = start
        self._stop = stop
        self._load = load

    @property
    def lead(self) -> tuple[Message, ...]:
        """The messages sent before the window (the system prompt, a summary): O(1)."""
        return self._lead

    def prefixed(self, lead: Sequence[Message]) -> MessageView:
        """This view with ``lead`` sent before it (O(len(lead)))."""
        return MessageView(
            self._items, self._start, self._stop, lead=(*lead, *self._lead), load=self._load
        )

    def __len__(self) -> int:
        return len(self._lead) + self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return self._slice(index)
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("MessageView index out of range")
        lead = len(self._lead)
        if index < lead:
            return self._lead[index]
        at = self._start + index - lead
        if self._load is not None:
            self._load(at, at + 1)
        item: Message = self._items[at]
        return item

    def _slice(self, index: slice) -> Sequence[Message]:
        begin, end, step = index.indices(len(self))
        if step != 1:
            return tuple(self)[index]
        end = max(begin, end)
        lead = len(self._lead)
        own = (max(begin, lead) - lead + self._start, max(end, lead) - lead + self._start)
        return MessageView(self._items, own[0], own[1], lead=self._lead[begin:end], load=self._load)

    def __iter__(self) -> Iterator[Message]:
        yield from self._lead
        if self._load is not None:
            self._load(self._start, self._stop)
        yield from list.__getitem__(self._items, slice(self._start, self._stop))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageView):
            if (
                other._items is self._items
                and other._start == self._start
                and other._stop == self._stop
            ):
                return other._lead == self._lead
        elif not isinstance(other, tuple):
            return NotImplemented
        # ``is`` first, as tuples compare: a shared message need not run its __eq__.
        return len(self) == len(other) and all(
            a is b or a == b for a, b in zip(self, other, strict=True)
        )

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))
