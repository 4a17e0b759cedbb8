"""LLM transports over httpx: OpenAI-compatible Chat Completions and Anthropic Messages.

In tests, give a session an ``LLM`` double of ``runtime.testing`` (``FunctionLLM``,
``ScriptedLLM``) instead; the transports themselves are tested against a scripted
loopback HTTP server.
"""

from __future__ import annotations

from protocols._util import fixup_module_metadata as _fixup

from ._anthropic import AnthropicTransport as AnthropicTransport
from ._base import Transport as Transport
from ._config import HTTPConfig as HTTPConfig
from ._config import ProviderConfig as ProviderConfig
from ._config import ProviderName as ProviderName
from ._config import Secret as Secret
from ._config import Timeouts as Timeouts
from ._config import open_http_client as open_http_client
from ._errors import HTTPX_ERROR_MAP as HTTPX_ERROR_MAP
from ._errors import error_from_body as error_from_body
from ._errors import error_from_status as error_from_status
from ._errors import map_httpx_errors as map_httpx_errors
from ._errors import parse_retry_after as parse_retry_after
from ._errors import redact as redact
from ._factory import provider_configured as provider_configured
from ._factory import transport_from_config as transport_from_config
from ._factory import transport_from_env as transport_from_env
from ._openai import OpenAITransport as OpenAITransport
from ._retry import Attempt as Attempt
from ._retry import AttemptObserver as AttemptObserver
from ._retry import RetryPolicy as RetryPolicy
from ._sse import ServerSentEvent as ServerSentEvent
from ._sse import iter_sse as iter_sse

_fixup(__name__, globals())
del _fixup
