"""The agents: the session actor, agent specs, built-in tools, the blackboard."""

from __future__ import annotations

from protocols._util import fixup_module_metadata as _fixup

_fixup(__name__, globals())
del _fixup
