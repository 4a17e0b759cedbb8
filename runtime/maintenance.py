"""Operating a log: check it (``check_store``), copy it out and in (``export_jsonl``,
``import_jsonl``) and drop what retention allows (``apply_retention``).

What the ``powertrio db`` commands run; each works on any ``EventStore``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from protocols.lowlevel import lazy_exports as _lazy_exports

__all__ = [
    "CheckProblem",
    "CheckReport",
    "TransferResult",
    "apply_retention",
    "check_store",
    "export_jsonl",
    "import_jsonl",
    "in_tree",
]

# Names load on first use, so importing the module costs none of their modules;
# type checkers read the imports below.
if _TYPE_CHECKING:
    from ._store._ops import (
        CheckProblem,
        CheckReport,
        TransferResult,
        apply_retention,
        check_store,
        export_jsonl,
        import_jsonl,
        in_tree,
    )
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "._store._ops": (
                "CheckProblem",
                "CheckReport",
                "TransferResult",
                "apply_retention",
                "check_store",
                "export_jsonl",
                "import_jsonl",
                "in_tree",
            ),
        },
    )
