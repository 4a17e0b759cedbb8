"""What the console's tests share: a recorded log and a console served on loopback."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import attrs
import httpx
import trio

from actors import spawn_session, tool
from actors._reading._sessions import build_tree
from actors._reading._tree import ACTIVE
from actors.cli._common import CliContext
from actors.cli._demo import demo_llm
from actors.cli._model import spawn_cli_session
from actors.cli._ui import CliOperator
from actors.console import console_app, serve_console
from protocols import LLMRequest, LLMResponse, ToolCall, ToolResultMessage, Usage
from runtime import EventStore, SqliteEventStore, open_runtime, open_sqlite_store
from runtime.testing import FunctionLLM

PAYLOAD = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
"""What an attacker would like the console to run: in a tool result and a model answer."""

SECRET = "sk-console-test-secret-0123456789"
"""An API key in the environment of the console: no page may show it."""


@tool
def fetch_page() -> str:
    """Fetch the page (its content is an attack)."""
    return "page says: " + PAYLOAD


@tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy to ``target`` (a person must approve each call)."""
    return f"deployed to {target}"


def _deploy_model(request: LLMRequest) -> LLMResponse:
    call = ToolCall(id="call-deploy", name="deploy", arguments='{"target": "prod"}')
    return LLMResponse(
        content="Deploying.", tool_calls=(call,), finish_reason="tool_calls", model="m"
    )


def _payload_model(request: LLMRequest) -> LLMResponse:
    usage = Usage(prompt_tokens=40, completion_tokens=9)
    if not any(isinstance(m, ToolResultMessage) for m in request.messages):
        call = ToolCall(id="call-fetch", name="fetch_page", arguments="{}")
        return LLMResponse(
            content="Reading it. " + PAYLOAD,
            tool_calls=(call,),
            finish_reason="tool_calls",
            usage=usage,
            model="payload-model",
        )
    return LLMResponse(content="The page said " + PAYLOAD, usage=usage, model="payload-model")


async def _settle(store: EventStore, session_id: str) -> None:
    with trio.fail_after(10):
        while True:
            tree = await build_tree(store, session_id, live=True)  # type: ignore[arg-type]
            if not any(n.status in ACTIVE for s, n in tree.nodes.items() if s != session_id):
                return
            await trio.sleep(0.02)


async def record_log(path: Path) -> None:
    """:func:`record_into` a new SQLite log at ``path``."""
    async with open_sqlite_store(path) as store:
        await record_into(store)


async def record_into(store: EventStore) -> None:
    """Four sessions: ``demo`` (the CLI's demo tree: a root and two helpers), ``xss``
    (a tool result and answers carrying :data:`PAYLOAD`), ``ask`` (waits for a human's
    answer), ``deploy`` (waits for a human's approval of a call)."""
    async with open_runtime(store=store) as runtime:
        demo = await spawn_cli_session(runtime, demo_llm(0), session_id="demo", interactive=False)
        assert (await demo.send("Plan the launch")).status == "completed"
        await _settle(store, "demo")
        xss = await spawn_session(
            runtime, llm=FunctionLLM(_payload_model), tools=[fetch_page], session_id="xss"
        )
        assert (await xss.send("Read the page " + PAYLOAD)).status == "completed"
        ask = await spawn_cli_session(runtime, demo_llm(0), session_id="ask", interactive=True)
        assert (await ask.send("ask me about the picnic")).status == "waiting_for_human"
        gated = await spawn_session(
            runtime, llm=FunctionLLM(_deploy_model), tools=[deploy], session_id="deploy"
        )
        assert (await gated.send("ship it")).status == "waiting_for_human"


def copy_log(source: Path, target: Path) -> Path:
    """A copy of a closed log (its WAL files too, if any)."""
    for part in source.parent.glob(source.name + "*"):
        if not part.name.endswith(".lock"):
            shutil.copy(part, target.parent / (target.name + part.name[len(source.name) :]))
    return target


@attrs.frozen
class Console:
    """A console served on loopback, and what drives it."""

    client: httpx.AsyncClient
    url: str
    store: SqliteEventStore
    db: Path

    async def csrf(self) -> str:
        token: str = (await self.client.get("/api/csrf")).json()["csrf"]
        return token

    async def until(self, session_id: str, status: str, *, node: str | None = None) -> dict:  # type: ignore[type-arg]
        """Poll the session's JSON until ``node`` (default: the root) has ``status``."""
        with trio.fail_after(20):
            while True:
                tree = (await self.client.get(f"/api/sessions/{session_id}")).json()["tree"]
                found = _find(tree, node or session_id)
                if found is not None and found["status"] == status:
                    return tree  # type: ignore[no-any-return]
                await trio.sleep(0.05)


def _find(tree: dict, session_id: str) -> dict | None:  # type: ignore[type-arg]
    if tree["session_id"] == session_id:
        return tree
    for child in tree["children"]:
        found = _find(child, session_id)
        if found is not None:
            return found
    return None


@asynccontextmanager
async def serve(
    db: Path,
    *,
    writable: bool = True,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    **options: object,
) -> AsyncIterator[Console]:
    """The console over ``db`` on a free loopback port; its forms act as ``powertrio ui``'s
    do (the CLI's operator, with the demo model)."""
    ctx = CliContext.create(db=str(db), json=False, debug=True)
    args = argparse.Namespace(demo=True, offline=False, max_tokens=None)
    async with open_sqlite_store(db) as store, trio.open_nursery() as nursery:
        operator = CliOperator(ctx, store, args, nursery) if writable else None
        app = console_app(store, operator=operator, token=token, **options)  # type: ignore[arg-type]
        url: str = await nursery.start(partial(serve_console, app, port=0, token=token))
        async with httpx.AsyncClient(
            base_url=url, headers=headers or {}, timeout=30, follow_redirects=True
        ) as client:
            yield Console(client=client, url=url, store=store, db=db)
        nursery.cancel_scope.cancel()
