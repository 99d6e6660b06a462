"""The message a consumer gets: the record's coordinates and payload (deserialized as the route
says), and ``delivery_attempt`` — for share groups the broker's per-record delivery count, for
consumer groups the route's retry counter of the partition (the seed's ``Message#delivery_attempt``).
A NamedTuple: immutable, cheap to make (a worker makes one per record) and picklable, so that a
process-pool job can take it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from quafka.client import Record

__all__ = ["Message"]


class Message(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    delivery_attempt: int
    raw_key: bytes | None = None
    raw_value: bytes | None = None

    @classmethod
    def from_record(cls, record: Record, key_deserializer: Callable | None, value_deserializer: Callable | None,
                    delivery_attempt: int | None = None) -> Message:
        key = record.key if key_deserializer is None else key_deserializer(record.key)
        value = record.value if value_deserializer is None else value_deserializer(record.value)
        attempt = delivery_attempt if delivery_attempt is not None else (record.delivery_count or 1)
        return cls(record.topic, record.partition, record.offset, record.timestamp, key, value, record.headers,
                   attempt, record.key, record.value)

    @property
    def redelivered(self) -> bool:
        return self.delivery_attempt > 1

    @property
    def coordinates(self) -> tuple[str, int, int]:
        return self[0], self[1], self[2]

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name`` (None when absent)."""
        for key, value in reversed(self.headers):
            if key == name:
                return value
        return None

    def __repr__(self) -> str:
        return (f"Message({self.topic}-{self.partition}@{self.offset}, attempt {self.delivery_attempt}, "
                f"value={self.value!r:.60})")
