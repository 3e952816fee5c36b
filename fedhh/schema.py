"""One key of the config schema: its type, default and constraint, and the error a bad value raises.

Every section of a config is a table of :class:`Key` declarations
(:func:`fedhh.config.schema` assembles them).  A protocol declares its own
``[protocol]`` keys with this type in its spec, so this module sits under
both the protocols and the config that reads their keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import InputError

Scalar = bool | int | float | str


class ConfigError(InputError):
    """A malformed or out-of-range configuration value."""


@dataclass(frozen=True)
class Key:
    """The declared type, default and constraint of one config key."""

    type: type
    default: Scalar
    help: str
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], bool] | None = None
    constraint: str = ""
    special: tuple[str, ...] = ()  # words accepted besides values of ``type``, e.g. ``"auto"``

    def validate(self, name: str, value: Any) -> Scalar:
        if isinstance(value, str) and value in self.special:
            return value
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            words = "".join(f" or {word!r}" for word in self.special)
            raise ConfigError(
                f"{name}: expected {self.type.__name__}{words}, got {type(value).__name__} {value!r}"
            )
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{name}: got {value!r}; allowed values: {list(self.choices)}")
        if self.check is not None and not self.check(value):
            raise ConfigError(f"{name}: got {value!r}; must be {self.constraint}")
        return value
