"""Pieces for those who extend powertrio's packages, not for everyday use."""

from __future__ import annotations

from ._util import fixup_module_metadata, unwrap_single_error

__all__ = ["fixup_module_metadata", "unwrap_single_error"]

fixup_module_metadata(__name__, globals())
