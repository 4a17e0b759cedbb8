"""The one place that makes a transcript provider-valid (invariant 5 of docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar, final

from protocols import AssistantMessage, Message, ToolResultMessage
from protocols.lowlevel import EMPTY_CHAIN, MessageView, chain_messages

from ._persistent import AppendVector

E = TypeVar("E")
"""A chunk's encoded form (see ``actors._session._persistent``)."""

INTERRUPTED = (
    "interrupted: this tool call did not finish (cancelled or crashed); its result is unknown"
)


@final
class ValidTranscript:
    """A transcript kept provider-valid as it grows, with its fingerprint chain.

    Providers reject a transcript where a tool call has no result, or a result answers no
    call. A crash, a cancel or a budget stop can leave such holes; :meth:`append` closes
    each open call with an explicit error result saying it was interrupted (never a fake
    success) as soon as the conversation moves on, and drops results that answer no
    pending call. Nothing else implements pairing: :func:`provider_valid` is a fold of
    :meth:`append`.

    Each step costs one hash of the new message and O(1) amortised memory, whatever the
    length of the history: the versions of one transcript share an append-only buffer
    (:class:`~actors._session._persistent.AppendVector`), so a session of months folds in time
    linear in its events and building the next request does not re-read the conversation.
    """

    __slots__ = ("_items", "digest", "pending")

    _items: AppendVector[Message]
    pending: tuple[str, ...]
    """Ids of the last assistant message's tool calls that have no result yet, in order."""
    digest: str
    """``chain_messages(EMPTY_CHAIN, messages)``: pass it to ``LLMRequest.fingerprint``."""

    def __init__(
        self,
        messages: Iterable[Message] = (),
        pending: tuple[str, ...] = (),
        digest: str = EMPTY_CHAIN,
    ) -> None:
        self._items = AppendVector(messages)
        self.pending = tuple(pending)
        self.digest = digest

    @classmethod
    def _of(
        cls, items: AppendVector[Message], pending: tuple[str, ...], digest: str
    ) -> ValidTranscript:
        self = object.__new__(cls)
        self._items = items
        self.pending = pending
        self.digest = digest
        return self

    @classmethod
    def from_chunks(
        cls,
        count: int,
        texts: Sequence[E],
        decode: Callable[[E], list[Message]],
        *,
        pending: tuple[str, ...],
        digest: str,
    ) -> ValidTranscript:
        """The transcript :meth:`chunks` encoded (a snapshot); messages decode when read.

        Raises:
            ValueError: ``texts`` has the wrong number of chunks for ``count``.
        """
        return cls._of(AppendVector.from_chunks(count, texts, decode), tuple(pending), digest)

    def chunks(self, encode: Callable[[list[Message]], E]) -> list[E]:
        """The messages encoded in chunks of ``CHUNK`` messages; a full chunk is encoded once
        for every version, so a snapshot costs the chunk still filling."""
        return self._items.chunks(encode)

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages as the model will see them (after :meth:`closed`); O(n) once per
        version, then cached."""
        return self._items.as_tuple()

    def view(self, start: int = 0, lead: tuple[Message, ...] = ()) -> MessageView:
        """The messages from ``start`` on, after ``lead``, as a view sharing the
        transcript's buffer: O(1) whatever the length of the history (what a request
        holds)."""
        items, begin, stop, load = self._items.window(start)
        return MessageView(items, begin, stop, lead=lead, load=load)

    @property
    def last(self) -> Message | None:
        """The last message (O(1)), or ``None`` for an empty transcript."""
        return self._items.last

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ValidTranscript):
            return NotImplemented
        return (
            self.digest == other.digest
            and self.pending == other.pending
            and self._items == other._items
        )

    def __hash__(self) -> int:
        return hash((self.digest, self.pending, len(self._items)))

    def __repr__(self) -> str:
        return (
            f"ValidTranscript(messages={self.messages!r}, pending={self.pending!r}, "
            f"digest={self.digest!r})"
        )

    def append(self, message: Message) -> ValidTranscript:
        """The transcript with ``message`` added (and any open calls closed before it)."""
        pending = self.pending
        if isinstance(message, ToolResultMessage):
            call_id = message.tool_call_id
            if call_id not in pending:
                return self  # answers no open call: providers would reject it
            # The last open call answered (the usual round has one) leaves none.
            left = () if len(pending) == 1 else tuple(i for i in pending if i != call_id)
            return ValidTranscript._of(
                self._items.append(message), left, chain_messages(self.digest, (message,))
            )
        base = self.closed() if pending else self
        calls = message.tool_calls if isinstance(message, AssistantMessage) else ()
        return ValidTranscript._of(
            base._items.append(message),
            tuple(c.id for c in calls) if calls else (),
            chain_messages(base.digest, (message,)),
        )

    def closed(self) -> ValidTranscript:
        """The transcript with every open call answered by an interrupted result."""
        if not self.pending:
            return self
        closing = tuple(
            ToolResultMessage(tool_call_id=call_id, content=INTERRUPTED, is_error=True)
            for call_id in self.pending
        )
        return ValidTranscript._of(
            self._items.extend(closing), (), chain_messages(self.digest, closing)
        )


def provider_valid(messages: Iterable[Message]) -> tuple[Message, ...]:
    """Pair every assistant tool call with exactly one result, right after it, in call order.

    Args:
        messages: user, assistant and tool messages in log order (a system message, if
            present, passes through).

    Returns:
        The messages with each assistant message followed by one result per tool call:
        open calls get an interrupted error result, results that answer no open call are
        dropped. See :class:`ValidTranscript`.
    """
    transcript = ValidTranscript()
    for message in messages:
        transcript = transcript.append(message)
    return transcript.closed().messages


def is_provider_valid(messages: Iterable[Message]) -> bool:
    """Whether every tool call has exactly one result right after its assistant message."""
    messages = tuple(messages)
    return provider_valid(messages) == messages
