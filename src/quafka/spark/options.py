"""The data source's options: names as Spark's Kafka source where they exist, checked at query
start. ``OptionError`` (a ValueError) names the option and says what is allowed.

``kafka.*`` options pass through to the clients with the prefix removed (``kafka.bootstrap.servers``
is required). Spark hands options over case-insensitively (lower-cased keys), so lookups here are
case-insensitive too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OptionError", "Options", "SHARE_STATE_TOPIC"]

SHARE_STATE_TOPIC = "__share_group_state"


class OptionError(ValueError):
    """A missing, unknown or contradictory option of format("quafka"); the message names it."""


class Options:
    """Case-insensitive access to the options with typed getters that raise OptionError."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._raw = {str(k).lower(): str(v) for k, v in dict(options).items()}

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._raw.get(name.lower(), default)

    def has(self, name: str) -> bool:
        return name.lower() in self._raw

    def required(self, name: str, what: str) -> str:
        value = self.get(name)
        if value is None or not value.strip():
            raise OptionError(f'format("quafka") needs the option {name!r}: {what}')
        return value.strip()

    def integer(self, name: str, default: int, minimum: int = 1) -> int:
        value = self.get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise OptionError(f"option {name!r}={value!r} is not an integer") from None
        if number < minimum:
            raise OptionError(f"option {name!r}={number} is below the minimum of {minimum}")
        return number

    def bootstrap_servers(self) -> str:
        return self.required("kafka.bootstrap.servers", "the brokers to connect to, host:port[,host:port]")

    def topics(self) -> list[str]:
        value = self.required("subscribe", "the topic(s) to read, comma-separated")
        topics = [t.strip() for t in value.split(",") if t.strip()]
        if not topics:
            raise OptionError(f"option 'subscribe'={value!r} names no topic")
        return topics

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """The ``kafka.*`` options without the prefix, plus ``extra``."""
        config: dict[str, Any] = {k[len("kafka."):]: v for k, v in self._raw.items() if k.startswith("kafka.")}
        config.update(extra)
        return config

    def refuse(self, names: tuple[str, ...], why: str) -> None:
        for name in names:
            if self.has(name):
                raise OptionError(f"option {name!r} {why}")
