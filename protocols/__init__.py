"""The vocabulary of powertrio: every format that crosses a boundary."""

from __future__ import annotations

from . import errors as errors
from ._util import fixup_module_metadata as _fixup
from .errors import PowertrioError as PowertrioError

_fixup(__name__, globals())
del _fixup
