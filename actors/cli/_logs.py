"""Where the library's log records go from the command line: nowhere unless asked.

The packages log under ``powertrio`` (a model error's traceback, a retry, a store's
recovery) and leave handlers to the application. The CLI is that application: by default
a person sees the one typed line of an error and nothing of the log; ``--debug`` (or
``--verbose``) shows the records and their tracebacks on stderr; ``--log-file PATH``
appends them to a file, with the traceback of the error the command ended with.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO, final

import attrs

from protocols.errors import OutputFileError

__all__ = ["CliLogs"]

LIBRARY_LOGGER = "powertrio"
"""The logger every module of the three packages logs under."""

_TERMINAL_FORMAT = "%(name)s: %(message)s"
_FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to ``sys.stderr`` as it is when a record comes: a live display (or a test)
    may have replaced it since the handler was made."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


@final
@attrs.define(eq=False)
class CliLogs:
    """The handlers one command installed on the library's logger, removed by :meth:`close`."""

    _handlers: list[logging.Handler]
    _file: logging.Handler | None
    _level: int

    @classmethod
    def open(cls, *, debug: bool, log_file: str | None) -> CliLogs:
        """Send the library's records at INFO and above where the options say.

        Raises:
            OutputFileError: ``log_file`` cannot be opened for appending.
        """
        logger = logging.getLogger(LIBRARY_LOGGER)
        handlers: list[logging.Handler] = []
        file: logging.Handler | None = None
        if log_file is not None:
            try:
                file = logging.FileHandler(log_file, encoding="utf-8")
            except OSError as exc:
                raise OutputFileError(log_file, exc.strerror or str(exc)) from None
            file.setFormatter(logging.Formatter(_FILE_FORMAT))
            handlers.append(file)
        if debug:
            terminal = _StderrHandler()
            terminal.setFormatter(logging.Formatter(_TERMINAL_FORMAT))
            handlers.append(terminal)
        level = logger.level
        if handlers and not logging.NOTSET < level <= logging.INFO:
            logger.setLevel(logging.INFO)
        for handler in handlers:
            logger.addHandler(handler)
        return cls(handlers, file, level)

    def failed(self, command: str, error: BaseException) -> None:
        """Write the error ``command`` ended with, and its traceback, to the log file."""
        if self._file is None or isinstance(error, (KeyboardInterrupt, BrokenPipeError)):
            return
        record = logging.getLogger(LIBRARY_LOGGER).makeRecord(
            f"{LIBRARY_LOGGER}.cli",
            logging.ERROR,
            __file__,
            0,
            "powertrio %s failed: %s",
            (command, error),
            (type(error), error, error.__traceback__),
        )
        self._file.handle(record)

    def close(self) -> None:
        """Remove and close the handlers; the logger's level is as it was."""
        logger = logging.getLogger(LIBRARY_LOGGER)
        for handler in self._handlers:
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(self._level)
