"""In-flight inspection and force actions for the Admin: quafka's API extension
(QuafkaDescribeInFlight, key 32000; QuafkaAlterInFlight, key 32001; `protocol/extensions.py`), as
`InFlightAdminMixin`, which `AsyncAdmin` inherits.

Only a quafka broker serves them: Apache Kafka has no admin API for in-flight records. Before
sending, the client checks that the broker advertised the API in ApiVersions; a broker that did not
gets `ExtensionUnavailable`, which says so plainly (it is never sent a request it would not know,
which Kafka answers by closing the connection).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from quafka.protocol.errors import ErrorCode
from quafka.protocol.extensions import (
    ACTION_ARCHIVE,
    ACTION_RELEASE,
    ACTION_RELEASE_KEY,
    QUAFKA_ALTER_IN_FLIGHT,
    QUAFKA_DESCRIBE_IN_FLIGHT,
)

from .errors import KafkaException, error_for_code

__all__ = ["AlterInFlightResult", "ExtensionUnavailable", "FailedKeyView", "InFlightAdminMixin", "InFlightPartitionView",
           "InFlightRange", "STATE_NAMES", "WAIT_REASONS"]

STATE_NAMES = {0: "AVAILABLE", 1: "ACQUIRED", 2: "ACKNOWLEDGED", 3: "ARCHIVING", 4: "ARCHIVED"}
WAIT_REASONS = {0: "", 1: "backoff", 2: "delivery-time"}


class ExtensionUnavailable(KafkaException):
    """The broker does not serve quafka's API extension (it is not a quafka broker)."""

    def __init__(self, what: str, address: str) -> None:
        super().__init__(f"{what} needs a quafka broker: the broker at {address} does not serve quafka's API "
                         "extension (Apache Kafka has no admin API for in-flight records)", ErrorCode.unsupported_version)


@dataclass(frozen=True)
class InFlightRange:
    """A range of a share partition's window in one state."""

    first_offset: int
    last_offset: int
    state: str  # AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED
    delivery_count: int
    member_id: str | None  # the holder while ACQUIRED
    client_id: str | None
    client_host: str | None
    lock_remaining_ms: int | None  # ACQUIRED: time left on its acquisition lock
    due_at_ms: int | None  # waiting: the epoch time it becomes deliverable
    wait_reason: str  # "", "backoff" or "delivery-time"
    blocked: bool  # key ordering: behind an earlier record of its key (or its key failed)
    pending: bool  # a state write is deciding it
    key: bytes | None  # key ordering: a single keyed record's key


@dataclass(frozen=True)
class FailedKeyView:
    key: bytes
    failed_offset: int
    waiting_offsets: tuple[int, ...]


@dataclass(frozen=True)
class InFlightPartitionView:
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    log_start_offset: int
    log_end_offset: int
    in_flight_count: int
    max_record_locks: int
    waiting_backoff_count: int
    waiting_delivery_count: int
    blocked_count: int
    key_ordering: bool
    truncated: bool
    dead_letter_topic: str | None  # the group's DLQ, when it has one
    ranges: tuple[InFlightRange, ...]
    failed_keys: tuple[FailedKeyView, ...]


@dataclass(frozen=True)
class AlterInFlightResult:
    changed: int  # records moved (would be, with validate_only)
    skipped: int  # settled, on their way to the DLQ, or being written
    not_fetched: int  # offsets past the end offset: nothing holds them
    keys_released: int


class InFlightAdminMixin:
    async def _extension_connection(self, group_id: str, api_key: int, what: str):
        conn = await self._coordinator(group_id)  # type: ignore[attr-defined]
        if api_key not in conn.api_versions:
            raise ExtensionUnavailable(what, conn.address)
        return conn

    async def describe_in_flight(self, group_id: str, topics: Iterable[str] | Mapping[str, Iterable[int]] | None = None,
                                 *, offset: int | None = None, max_rows: int = 1000,
                                 ) -> dict[tuple[str, int], InFlightPartitionView]:
        """The in-flight windows of a share group's partitions, {(topic, partition): view}.

        ``topics``: None for every share partition the group has state for, a list of topic names
        (every partition with state), or {topic: partitions}. ``offset``: only the range holding
        that offset (empty when it is outside the window). Raises for a missing group, topic or
        partition (naming it), and ExtensionUnavailable against a broker that is not quafka."""
        conn = await self._extension_connection(group_id, QUAFKA_DESCRIBE_IN_FLIGHT, "describing in-flight records")
        if topics is None:
            wanted: list[dict[str, Any]] = []
        elif isinstance(topics, Mapping):
            wanted = [{"topic_name": t, "partitions": list(ps)} for t, ps in topics.items()]
        else:
            wanted = [{"topic_name": t, "partitions": []} for t in topics]
        response = await conn.call(QUAFKA_DESCRIBE_IN_FLIGHT, {
            "group_id": group_id, "topics": wanted, "offset": -1 if offset is None else offset, "max_rows": max_rows})
        _raise(response.error_code, f"describing the in-flight records of group {group_id!r}", response.error_message)
        out: dict[tuple[str, int], InFlightPartitionView] = {}
        for t in response.topics:
            _raise(t.error_code, f"in-flight records of group {group_id!r} on topic {t.topic_name}", t.error_message)
            for p in t.partitions:
                _raise(p.error_code, f"in-flight records of group {group_id!r} on {t.topic_name}-{p.partition_index}",
                       p.error_message)
                out[(t.topic_name, p.partition_index)] = InFlightPartitionView(
                    t.topic_name, p.partition_index, p.start_offset, p.end_offset, p.log_start_offset, p.log_end_offset,
                    p.in_flight_count, p.max_record_locks, p.waiting_backoff_count, p.waiting_delivery_count,
                    p.blocked_count, p.key_ordering, p.truncated, p.dead_letter_topic,
                    tuple(InFlightRange(r.first_offset, r.last_offset, STATE_NAMES.get(r.state, str(r.state)),
                                        r.delivery_count, r.member_id, r.client_id, r.client_host,
                                        r.lock_remaining_ms if r.lock_remaining_ms >= 0 else None,
                                        r.due_at_ms if r.due_at_ms >= 0 else None,
                                        WAIT_REASONS.get(r.wait_reason, str(r.wait_reason)), r.blocked, r.pending,
                                        r.key) for r in p.rows),
                    tuple(FailedKeyView(f.key, f.failed_offset, tuple(f.waiting_offsets)) for f in p.failed_keys))
        return out

    async def alter_in_flight(self, group_id: str, topic: str, partition: int, action: str, *,
                              first_offset: int = -1, last_offset: int = -1, reset_delivery_count: bool = False,
                              key: bytes | None = None, validate_only: bool = False) -> AlterInFlightResult:
        """A force action on one share partition: ``action`` "release" (the offsets become
        deliverable at once; ``reset_delivery_count`` sets their delivery counts to 0), "archive"
        (archived, through the group's DLQ when it has one) or "release-key" (a failed key of key
        ordering flows again). ``validate_only``: what it would change, changing nothing."""
        codes = {"release": ACTION_RELEASE, "archive": ACTION_ARCHIVE, "release-key": ACTION_RELEASE_KEY}
        if action not in codes:
            raise ValueError(f"action must be one of {', '.join(codes)}, not {action!r}")
        conn = await self._extension_connection(group_id, QUAFKA_ALTER_IN_FLIGHT, f"a force {action}")
        response = await conn.call(QUAFKA_ALTER_IN_FLIGHT, {
            "group_id": group_id, "topic_name": topic, "partition_index": partition, "action": codes[action],
            "first_offset": first_offset, "last_offset": last_offset, "reset_delivery_count": reset_delivery_count,
            "key": key, "validate_only": validate_only})
        _raise(response.error_code, f"force {action} on group {group_id!r}, {topic}-{partition}", response.error_message)
        return AlterInFlightResult(response.changed_count, response.skipped_count, response.not_fetched_count,
                                   response.keys_released)


def _raise(code: int, context: str, message: str | None) -> None:
    if code != ErrorCode.none:
        error = error_for_code(code, context)
        raise KafkaException(f"{error.message}: {message}", error.code) if message else error
