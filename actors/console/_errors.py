"""Errors of the web console (``powertrio ui``): what it refuses before it serves a page.

``actors.console`` exports them.
"""

from __future__ import annotations

from protocols.errors import ConfigError
from protocols.lowlevel import fixup_module_metadata as _fixup

__all__ = ["ConsoleTokenRequiredError"]


class ConsoleTokenRequiredError(ConfigError):
    """The console was asked to listen beyond loopback without a bearer token.

    Anyone who can reach the port could read every transcript and answer human requests,
    so a non-loopback bind needs ``--token`` or ``POWERTRIO_UI_TOKEN``; ``host`` is the
    address that was refused.
    """

    code = "config.console_token"

    def __init__(self, host: str) -> None:
        self.host = host
        super().__init__(
            f"the console would listen on {host!r}, beyond this machine, with no token: "
            "anyone reaching it could read every log and answer human requests; give "
            "--token T (or set POWERTRIO_UI_TOKEN), or bind to 127.0.0.1"
        )


# Tracebacks and pickles name the public namespace, whether or not it was imported yet.
_fixup("actors.console", globals())
del _fixup
