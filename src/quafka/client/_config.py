"""Configuration dicts with Kafka's dotted names: known keys, types, ranges, defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from .errors import ConfigException

__all__ = ["Key", "parse_config"]

_REQUIRED = object()


class Key(NamedTuple):
    """One configuration key: its type (int, bool or str), default and lowest allowed value."""

    type: type
    default: Any = _REQUIRED
    min_value: int | None = None

    @classmethod
    def required(cls, type_: type) -> "Key":
        return cls(type_, _REQUIRED)


def _convert(name: str, key: Key, value: Any) -> Any:
    if key.type is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigException(name, f"{name}={value!r} is not a boolean: use true or false")
    if key.type is int:
        try:
            number = int(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None:
            raise ConfigException(name, f"{name}={value!r} is not an integer")
        if key.min_value is not None and number < key.min_value:
            raise ConfigException(name, f"{name}={number} is below the minimum of {key.min_value}")
        return number
    if not isinstance(value, str):
        raise ConfigException(name, f"{name}={value!r} is not a string")
    return value


def parse_config(config: Mapping[str, Any], keys: Mapping[str, Key], what: str) -> dict[str, Any]:
    """Validate ``config`` against ``keys``; ConfigException names an unknown or bad key."""
    unknown = sorted(set(config) - set(keys))
    if unknown:
        raise ConfigException(unknown[0], f"unknown {what} configuration key {unknown[0]!r}; "
                                          f"allowed keys: {', '.join(sorted(keys))}")
    out: dict[str, Any] = {}
    for name, key in keys.items():
        if name in config:
            out[name] = _convert(name, key, config[name])
        elif key.default is _REQUIRED:
            raise ConfigException(name, f"{what} configuration needs {name!r}")
        else:
            out[name] = key.default
    return out
