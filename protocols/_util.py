"""Small helpers shared by the three packages."""

from __future__ import annotations

import sys

import attrs


def fixup_module_metadata(module_name: str, namespace: dict[str, object]) -> None:
    """Make re-exported names report the public module, so reprs and docs say ``runtime.Runtime``.

    Trio does the same in ``trio._util``: tracebacks and docs then name the public module,
    not the private file a class happens to live in.

    String annotations (``from __future__ import annotations``) are resolved against a
    class's module, so attrs classes get their field types resolved first, while their
    original module is still the one that defines the names; a class whose annotations
    cannot be resolved yet keeps its module.
    """
    package = module_name.split(".", maxsplit=1)[0]
    for name, obj in namespace.items():
        if name.startswith("_") or not (isinstance(obj, type) or callable(obj)):
            continue
        current = getattr(obj, "__module__", None)
        if not (isinstance(current, str) and current.split(".")[0] == package and "._" in current):
            continue
        if isinstance(obj, type) and attrs.has(obj):
            # A hint-only import (under TYPE_CHECKING, e.g. to break an import cycle) is
            # missing from the defining module but often re-exported by the package.
            defining = vars(sys.modules[current]) if current in sys.modules else {}
            try:
                attrs.resolve_types(obj, globalns={**namespace, **defining})
            except NameError:
                continue
        try:
            obj.__module__ = module_name
        except (AttributeError, TypeError):  # builtins and slotted callables refuse
            continue
