"""Public test kit: in-memory fakes, scripted LLMs, fault injection, virtual time.

``import runtime`` does not load this module.
"""

from __future__ import annotations

from protocols._util import fixup_module_metadata as _fixup

_fixup(__name__, globals())
del _fixup
