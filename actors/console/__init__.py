"""The web console: a session's agent tree live, its log with time travel, replays,
forks, human requests and usage charts, served from any event log.

Needs the ``console`` extra (``pip install 'powertrio[console]'``: Starlette and
Hypercorn). ``powertrio ui --db PATH`` serves it on 127.0.0.1; an app that runs its own
sessions mounts :func:`console_app` with an :class:`Operator` of its own. See
``docs/console.md``.
"""

from __future__ import annotations

from protocols.lowlevel import fixup_module_metadata as _fixup

from ._app import console_app as console_app
from ._errors import ConsoleTokenRequiredError as ConsoleTokenRequiredError
from ._fleet import LogFleetSource as LogFleetSource
from ._operator import FleetSource as FleetSource
from ._operator import Operator as Operator
from ._operator import Verdict as Verdict
from ._serve import check_bind as check_bind
from ._serve import serve_console as serve_console

_fixup(__name__, globals())
del _fixup
