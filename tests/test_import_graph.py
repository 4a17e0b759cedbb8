"""No import cycle between the modules of protocols, runtime and actors.

``lint-imports`` checks the layers and the contracts in ``pyproject.toml``, but it says
nothing of a cycle inside a layer, and an import made inside a function (to load
something lazily, or to dodge a cycle) is as much a dependency as one at the top. So
this walks every module's syntax tree, takes every import wherever it is made (only
those under ``if TYPE_CHECKING:`` are left out: they never run), and looks for
strongly connected components in the graph of modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocols", "runtime", "actors")

# Cycles allowed while they are being cut (none now), each struck off once cut: a
# cycle not listed fails, and so does a listed one that is gone (strike it off).
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, whether it is a package's ``__init__``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, at any depth, but in a TYPE_CHECKING block."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child.test):
            for statement in child.orelse:
                yield from _imports_of(statement)
            continue
        yield from _imports_of(child)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    yield from _imports(node)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the three packages it imports (``from p import sub``
    counts as importing ``p.sub`` when that is a module)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        edges: set[str] = set()
        for statement in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(statement, ast.Import):
                edges.update(alias.name for alias in statement.names if alias.name in modules)
                continue
            if statement.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (statement.level - 1)]
                source = ".".join([*base, *([statement.module] if statement.module else [])])
            else:
                source = statement.module or ""
            for alias in statement.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    edges.add(submodule)
                elif source in modules:
                    edges.add(source)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            pushed = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    pushed = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if pushed:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def _show(found: set[frozenset[str]]) -> list[list[str]]:
    return sorted(sorted(component) for component in found)


def test_the_walk_sees_imports_inside_functions_and_skips_type_checking_ones() -> None:
    """The graph holds an import made inside a function and leaves out a type-only one:
    ``runtime._cluster._node`` imports the PostgreSQL store in a function and for types."""
    graph = import_graph()
    assert "runtime._postgres._store" in graph["runtime._cluster._node"]
    assert "runtime._runtime" not in graph["runtime._cluster._node"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}


def test_no_module_cycle_but_the_known_ones() -> None:
    """No cycle between modules of protocols, runtime and actors beyond the known list."""
    new = cycles(import_graph()) - KNOWN_CYCLES
    assert not new, f"import cycles: {_show(new)}"


def test_the_known_cycles_are_still_there() -> None:
    """A cycle that was cut is struck off the known list, so it cannot come back."""
    gone = KNOWN_CYCLES - cycles(import_graph())
    assert not gone, f"cut, strike them off KNOWN_CYCLES: {_show(gone)}"
