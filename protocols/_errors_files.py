"""Errors about files on this machine: the log's own file, and the files users export to
and import from.

Kept apart from the log's story (``_errors_log``): these say that a path is missing,
locked, unwritable or not what it should be, which the user fixes with a path, a free
disk or a stopped process, never with a restore.
"""

from __future__ import annotations

from ._errors_base import PowertrioError
from ._errors_log import StoreError

__all__ = [
    "BadInputFileError",
    "FileAccessError",
    "InputFileNotFoundError",
    "OutputFileError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
]


class StoreNotFoundError(StoreError, LookupError):
    """There is no event log at the path given (or its folder does not exist)."""

    code = "store.not_found"

    def __init__(self, path: str, hint: str) -> None:
        self.path = path
        super().__init__(f"no event log at {path!r}: {hint}")


class StoreLockedError(StoreError):
    """Another process drives the sessions of this log; ``holder`` names it."""

    code = "store.locked"

    def __init__(self, path: str, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(
            f"the event log {path!r} is being driven by {holder}; stop it there (Ctrl-C), "
            "or wait for it to end"
        )


class StoreReadOnlyError(StoreError):
    """The log's file, or the folder it is in, cannot be written by this process.

    SQLite writes beside the file too (its ``-wal`` and ``-shm`` files), and opening a log
    writes to it (recovery, upgrades), so even a reading command needs both writable.
    """

    code = "store.read_only"

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"the event log {path!r} is read-only ({detail}): let this user write the file "
            "and its folder (SQLite keeps its -wal and -shm files beside it), or copy the "
            "log to a writable folder and point --db at the copy"
        )


class FileAccessError(PowertrioError):
    """A file named by the user could not be read or written."""

    code = "io"


class InputFileNotFoundError(FileAccessError, LookupError):
    """The file to read does not exist."""

    code = "io.not_found"

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"no file at {path!r}: check the path")


class OutputFileError(FileAccessError):
    """The file to write could not be created or written; nothing partial is left behind."""

    code = "io.write_failed"

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"could not write {path!r}: {reason}")


class BadInputFileError(FileAccessError, ValueError):
    """The file to read is not in the expected format; ``line`` is 1-based where known."""

    code = "io.bad_input"

    def __init__(self, path: str, detail: str, *, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.detail = detail
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{path!r} is not a powertrio export: {where}{detail}")
