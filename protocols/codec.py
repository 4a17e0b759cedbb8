"""Events to bytes and back: the codec every event store and every replay reads through.

``event_type`` registers an attrs class under a stable name and version (with upcasters
for older versions); ``encode`` and ``decode`` (or ``decode_record`` for a stored record)
turn events into JSON bytes and back; ``make_converter`` and ``configure_converter`` give
the cattrs converter the packages use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._util import lazy_exports as _lazy_exports

__all__ = [
    "EncodedEvent",
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

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._codec import (
        EncodedEvent,
        EventRegistry,
        RecordLike,
        Upcaster,
        configure_converter,
        decode,
        decode_record,
        default_registry,
        encode,
        event_type,
        make_converter,
    )
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._codec": (
                "EncodedEvent",
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
            ),
        },
    )
