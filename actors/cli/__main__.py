"""``python -m actors.cli``: the ``powertrio`` command."""

from __future__ import annotations

from actors.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
