"""The agents: the session actor, agent specs, built-in tools, the blackboard."""

from __future__ import annotations

from protocols._util import fixup_module_metadata as _fixup

from ._tool_runner import ToolRunner as ToolRunner
from ._tool_runner import open_tool_runner as open_tool_runner
from ._tool_runner import run_tool_calls as run_tool_calls
from ._tools import Tool as Tool
from ._tools import ToolContext as ToolContext
from ._tools import ToolKind as ToolKind
from ._tools import ToolRegistry as ToolRegistry
from ._tools import tool as tool

_fixup(__name__, globals())
del _fixup
