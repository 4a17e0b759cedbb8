"""The agent tree the CLI and the console show, built from observations or from the log."""

from __future__ import annotations

from typing import final

import attrs

from actors.events import (
    AssistantRecorded,
    ChildFinished,
    ChildSpawned,
    DeltaReceived,
    HumanAnswered,
    HumanRequested,
    LLMCallFinished,
    Observation,
    RoundBegan,
    RunBegan,
    RunEnded,
    RunFinished,
    RunStarted,
    ToolCallBegan,
    ToolCallFinished,
    ToolFinished,
    ToolStarted,
)

from ._log import in_session_tree

__all__ = ["ACTIVE", "AgentTree", "TreeNode"]

ACTIVE = frozenset({"running", "waiting_for_human"})
"""Statuses of a node whose run has not ended."""


@final
@attrs.define(eq=False)
class TreeNode:
    """One agent of the tree."""

    session_id: str
    parent_id: str | None
    name: str
    task: str = ""
    status: str = "new"
    rounds: int = 0
    """LLM calls of all its runs, as ``powertrio sessions`` counts them."""
    own_tokens: int = 0
    """Tokens of this agent's own LLM calls, from its own stream or live observations."""
    reported_tokens: int = 0
    """Tokens its parent's ``ChildFinished`` reported (for a sub-agent whose stream is gone)."""
    seen: bool = False
    """Whether any event of its own stream, or observation of it, was taken in."""
    tools: dict[str, str] = attrs.Factory(dict)
    """Open tool calls: call id → tool name."""
    thinking: bool = False
    """An LLM call is in flight."""
    said: str = ""
    """The tail of what it last streamed or answered."""
    children: list[str] = attrs.Factory(list)

    @property
    def tokens(self) -> int:
        """Tokens of its own LLM calls (its sub-agents' are on their nodes): one fold of its
        own stream, the same as ``powertrio sessions``; what its parent reported only when
        its stream is gone (an ephemeral sub-agent), so nothing is counted twice."""
        return self.own_tokens if self.seen else self.reported_tokens

    def to_json(self, tree: AgentTree) -> dict[str, object]:
        """The node and its subtree as JSON."""
        return {
            "session_id": self.session_id,
            "parent_id": self.parent_id,
            "name": self.name,
            "task": self.task,
            "status": self.status,
            "rounds": self.rounds,
            "tokens": self.tokens,
            "tools": sorted(set(self.tools.values())),
            "children": [tree.nodes[c].to_json(tree) for c in self.children],
        }


@final
@attrs.define(eq=False)
class AgentTree:
    """A session and its sub-agents, fed by observations (live) or log events (after the fact).

    Sub-agent ids extend their parent's (``root.1``, ``root.1.2``), so a node's place is
    known even before the parent's ``ChildSpawned`` names it.
    """

    root_id: str
    root_name: str = "agent"
    nodes: dict[str, TreeNode] = attrs.Factory(dict)
    parents: dict[str, str] = attrs.Factory(dict)
    """Parents that the ids do not say: a workflow's agent steps (``wf.3.1.0``) hang on
    the workflow ``wf``. Set before the node is first made."""

    def __attrs_post_init__(self) -> None:
        self.node(self.root_id)

    def node(self, session_id: str) -> TreeNode:
        """The node of ``session_id``, created (under its parent) when new."""
        found = self.nodes.get(session_id)
        if found is not None:
            return found
        parent_id: str | None = self.parents.get(session_id)
        if parent_id is None and session_id != self.root_id and "." in session_id:
            parent_id = session_id.rsplit(".", 1)[0]
        name = self.root_name if session_id == self.root_id else "agent"
        node = TreeNode(session_id=session_id, parent_id=parent_id, name=name)
        self.nodes[session_id] = node
        if parent_id is not None and in_session_tree(self.root_id, parent_id):
            parent = self.node(parent_id)
            if session_id not in parent.children:
                parent.children.append(session_id)
        return node

    @property
    def root(self) -> TreeNode:
        """The top node."""
        return self.nodes[self.root_id]

    @property
    def total_tokens(self) -> int:
        """Tokens of the whole tree."""
        return sum(n.tokens for n in self.nodes.values())

    # -- feeding -------------------------------------------------------------------------

    def observe(self, observation: Observation) -> None:
        """Take in one live observation of the session's bus (shared by its sub-agents)."""
        if isinstance(observation, RunEnded):
            result = observation.result
            node = self.node(result.session_id)
            node.status = result.status
            node.tools.clear()
            node.thinking = False
            if result.text:
                node.said = result.text
            return
        node = self.node(observation.session_id)
        node.seen = True
        if isinstance(observation, RunBegan):
            node.status, node.said = "running", ""
            node.tools.clear()
        elif isinstance(observation, RoundBegan):
            node.status, node.thinking, node.said = "running", True, ""
        elif isinstance(observation, DeltaReceived):
            text = getattr(observation.delta, "text", None)
            if isinstance(text, str) and getattr(observation.delta, "type", "") == "text":
                node.said = (node.said + text)[-400:]
        elif isinstance(observation, LLMCallFinished):
            node.thinking = False
            node.rounds += 1
            node.own_tokens += observation.usage.total_tokens
        elif isinstance(observation, ToolCallBegan):
            node.tools[observation.call_id] = observation.name
        elif isinstance(observation, ToolCallFinished):
            node.tools.pop(observation.outcome.call_id, None)

    def apply(self, session_id: str, event: object) -> None:
        """Take in one decoded event of ``session/<session_id>`` from the log."""
        node = self.node(session_id)
        node.seen = True
        if isinstance(event, ChildSpawned):
            child = self.node(event.child_id)
            child.name, child.task = event.agent, event.task
        elif isinstance(event, RunStarted):
            node.status = "running"
            node.tools.clear()
            if session_id == self.root_id and event.input:
                node.task = event.input
        elif isinstance(event, AssistantRecorded):
            node.rounds += 1
            node.own_tokens += event.usage.total_tokens
            if event.message.content:
                node.said = event.message.content
        elif isinstance(event, ToolStarted):
            node.tools[event.call_id] = event.name
        elif isinstance(event, ToolFinished):
            node.tools.pop(event.outcome.call_id, None)
        elif isinstance(event, HumanRequested):
            node.status = "waiting_for_human"
        elif isinstance(event, HumanAnswered):
            node.status = "running"
        elif isinstance(event, RunFinished):
            node.status = event.status
            node.tools.clear()
        elif isinstance(event, ChildFinished):
            child = self.node(event.child_id)
            if child.status in ACTIVE or child.status == "new":
                child.status = event.status  # an ephemeral child's own stream is gone
            child.reported_tokens = event.usage.total_tokens

    def mark_interrupted(self) -> None:
        """Call a run that is open in the log but driven by no process ``interrupted``."""
        for node in self.nodes.values():
            if node.status == "running":
                node.status = "interrupted"
                node.tools.clear()

    # -- showing -------------------------------------------------------------------------

    def to_json(self) -> dict[str, object]:
        """The whole tree as nested JSON."""
        return self.root.to_json(self)
