"""The kernel's extension points, for those who build actors kinds or stores on it.

Everyday code needs none of this: ``runtime`` has the actors, the stores and the timers.
"""

from __future__ import annotations

from ._virtual_time import hold_virtual_clock

__all__ = ["hold_virtual_clock"]
