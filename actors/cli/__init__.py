"""The ``powertrio`` command line: run agents, watch their trees, read and keep the log."""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._main import build_parser as build_parser
from ._main import main as main

_fixup(__name__, globals())
del _fixup
