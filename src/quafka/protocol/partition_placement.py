"""Which partition of an internal topic holds a coordinator's key.

Kafka places a share-partition's state on `__share_group_state` partition
`Utils.abs(key.hashCode()) % partitions` with key "group:topicIdBase64:partition"
(`SharePartitionKey.asCoordinatorKey`, `ShareCoordinatorService.partitionFor`), and a group's
records on `__consumer_offsets` partition `Utils.abs(groupId.hashCode()) % partitions`
(`GroupCoordinatorService.partitionFor`). The pieces: Java's String.hashCode, Kafka's Utils.abs
and Kafka's base64 text form of a topic id (`Uuid.toString`).

Pure and synchronous: broker, tests and tools share this one implementation.
"""

from __future__ import annotations

import base64
import struct
from uuid import UUID


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: h = 31*h + c over the UTF-16 code units, as a signed int32."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", s.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h >= 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: the absolute value, except that Integer.MIN_VALUE maps to 0."""
    return 0 if n == -0x80000000 else abs(n)


def kafka_uuid_str(topic_id: UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes without padding (22 characters)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def share_coordinator_key(group_id: str, topic_id: UUID, partition: int) -> str:
    """The coordinator key of a share-partition: "group:topicIdBase64:partition"."""
    return f"{group_id}:{kafka_uuid_str(topic_id)}:{partition}"


def _place(key: str, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return kafka_abs(java_string_hash(key)) % num_partitions


def share_state_partition(group_id: str, topic_id: UUID, partition: int, num_partitions: int) -> int:
    """The `__share_group_state` partition that holds the state of one share-partition."""
    return _place(share_coordinator_key(group_id, topic_id, partition), num_partitions)


def transaction_state_partition(transactional_id: str, num_partitions: int) -> int:
    """The `__transaction_state` partition that holds a transactional id's records
    (`TransactionStateManager.partitionFor`: Utils.abs(transactionalId.hashCode) % partitions)."""
    return _place(transactional_id, num_partitions)


def group_partition(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition that holds a group's records."""
    return _place(group_id, num_partitions)
