"""Lazy re-exports for a package's ``__init__`` (PEP 562): a name's module loads on first use."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

from protocols.lowlevel import fixup_module_metadata


def lazy_exports(
    package: str, exports: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, which re-exports, from each
    private module (relative, e.g. ``"._agents"``), the names listed for it.

    Importing the package then costs nothing of its modules: ``powertrio --help`` and a
    program that uses a few names load only what those names need. A name is bound in the
    package on first access, so later lookups are plain attribute reads, and every export
    of a module loaded by then is bound and fixed up with it (``__module__`` names the
    package, as an eager ``__init__`` would have done), so classes reached through another
    name, e.g. the ``Session`` that ``spawn_session`` returns, report the package too.
    """
    namespace = vars(sys.modules[package])
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        importlib.import_module(module, package)
        for other, names in exports.items():
            loaded = sys.modules.get(f"{package}{other}")
            if loaded is not None:
                namespace.update({n: getattr(loaded, n) for n in names if n not in namespace})
        fixup_module_metadata(package, namespace)
        return namespace[name]

    def __dir__() -> list[str]:
        return sorted({*namespace, *home})

    return __getattr__, __dir__
