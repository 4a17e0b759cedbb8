"""The root of the error tree and its configuration branch (``config.*``).

Every other ``_errors_*`` module builds on the root defined here; ``protocols.errors`` is
the public face that re-exports them all and draws the whole tree.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AgentSpecError",
    "ConfigError",
    "MissingExtraError",
    "MissingSettingError",
    "PowertrioError",
]


class PowertrioError(Exception):
    """The root of every error powertrio raises.

    ``code`` is stable and machine-readable; ``str(error)`` is for people.
    """

    code: ClassVar[str] = "powertrio"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


# --- configuration -------------------------------------------------------------------


class ConfigError(PowertrioError, ValueError):
    """A configuration value is invalid."""

    code = "config.invalid"


class MissingSettingError(ConfigError):
    """A required setting is missing; ``variable`` names the environment variable."""

    code = "config.missing"

    def __init__(self, variable: str, message: str | None = None) -> None:
        self.variable = variable
        super().__init__(message or f"missing setting: set the environment variable {variable}")


class MissingExtraError(ConfigError):
    """A feature needs an optional extra that is not installed.

    ``feature`` is what was asked for (``powertrio ui``), ``extra`` the extra that brings
    it (``console``) and ``module`` the module found missing (``starlette``).
    """

    code = "config.missing_extra"

    def __init__(self, feature: str, extra: str, module: str) -> None:
        self.feature = feature
        self.extra = extra
        self.module = module
        super().__init__(
            f"{feature} needs the {extra!r} extra ({module} is not installed): "
            f"pip install 'powertrio[{extra}]'"
        )


class AgentSpecError(ConfigError):
    """An agent spec is invalid; ``problems`` lists every problem found, not just the first."""

    code = "config.agent_spec"

    def __init__(self, name: str, problems: tuple[str, ...]) -> None:
        self.name = name
        self.problems = problems
        listed = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"agent spec {name!r} is invalid:\n{listed}")
