"""What the client's metadata says, as plain values: brokers, topics and their partitions' leaders.
``_cluster.Cluster`` fills them from Metadata responses; the sans-I/O modules read them."""

from __future__ import annotations

from typing import NamedTuple
from uuid import UUID

from quafka.protocol.errors import ErrorCode

__all__ = ["BrokerInfo", "PartitionInfo", "TopicInfo"]


class BrokerInfo(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


class PartitionInfo(NamedTuple):
    partition: int
    leader_id: int
    leader_epoch: int
    error_code: ErrorCode


class TopicInfo(NamedTuple):
    name: str
    topic_id: UUID | None
    partitions: dict[int, PartitionInfo]
    is_internal: bool
