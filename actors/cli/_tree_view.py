"""The agent tree as the CLI draws it with ``rich``: each node's name, status and work."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._reading._format import shorten

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text
    from rich.tree import Tree

    from .._reading._tree import AgentTree, TreeNode

__all__ = ["render_tree"]

_STYLES: dict[str, tuple[str, str]] = {
    "new": ("○", "dim"),
    "running": ("●", "yellow"),
    "interrupted": ("◌", "yellow"),
    "waiting_for_human": ("?", "bold blue"),
    "completed": ("✔", "green"),
    "failed": ("✖", "bold red"),
    "cancelled": ("■", "magenta"),
    "hit_round_limit": ("!", "yellow"),
    "budget_exceeded": ("!", "yellow"),
}


def render_tree(tree: AgentTree) -> Tree:
    """A ``rich`` tree: each node's name, status, rounds, tokens and current tools."""
    from rich.tree import Tree  # noqa: PLC0415  # rich loads only for the CLI

    drawn = Tree(_label(tree.root), guide_style="dim")
    _grow(tree, drawn, tree.root)
    return drawn


def _grow(tree: AgentTree, branch: Tree, node: TreeNode) -> None:
    for child_id in node.children:
        child = tree.nodes[child_id]
        _grow(tree, branch.add(_label(child)), child)


def _label(node: TreeNode) -> RenderableType:
    from rich.text import Text  # noqa: PLC0415

    icon, style = _STYLES.get(node.status, ("·", ""))
    label = Text()
    label.append(f"{icon} ", style=style)
    label.append(node.name, style="bold")
    label.append(f" {node.session_id}", style="dim")
    label.append(f"  {node.status.replace('_', ' ')}", style=style)
    label.append(f"  rounds {node.rounds} · {node.tokens:,} tok", style="dim")
    if node.thinking:
        label.append("  thinking…", style="italic cyan")
    if node.tools:
        label.append("  ⚙ " + ", ".join(sorted(set(node.tools.values()))), style="cyan")
    lines: list[Text] = [label]
    if node.task and node.parent_id is not None:
        lines.append(Text("  task: " + shorten(node.task, 70), style="dim"))
    if node.said and node.parent_id is not None:
        lines.append(Text("  said: " + shorten(node.said, 70), style="dim italic"))
    return _stack(lines)


def _stack(lines: Iterable[Text]) -> RenderableType:
    from rich.console import Group  # noqa: PLC0415

    return Group(*lines)
