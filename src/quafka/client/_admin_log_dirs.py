"""Log directories for the Admin: DescribeLogDirs (key 35), as `LogDirsAdminMixin`, which
`AsyncAdmin` inherits.

As Kafka's `Admin.describeLogDirs` (`KafkaAdminClient`), the request goes to every broker of the
cluster, each describing its own log directories: the path, the size of each partition it holds,
and (v4+, Kafka 3.3+; quafka serves it) the total and usable bytes of the file system. It works
against Apache Kafka as against quafka. DESCRIBE on the CLUSTER is needed: without it the broker
answers CLUSTER_AUTHORIZATION_FAILED (v3+), raised here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from quafka.protocol.errors import ErrorCode

from .errors import error_for_code

__all__ = ["LogDirDescription", "LogDirPartition", "LogDirsAdminMixin"]

DESCRIBE_LOG_DIRS_KEY = 35


@dataclass(frozen=True)
class LogDirPartition:
    topic: str
    partition: int
    size_bytes: int  # every segment of the partition's log in this directory
    offset_lag: int  # the log end offset's lag behind the high watermark (0 on one node)
    is_future: bool  # a future log being moved here (AlterReplicaLogDirs); quafka: never


@dataclass(frozen=True)
class LogDirDescription:
    broker_id: int
    path: str
    error_code: int  # 0, or e.g. KAFKA_STORAGE_ERROR for an offline directory (then no partitions)
    total_bytes: int | None  # the file system's size; None when the broker does not say (before v4)
    usable_bytes: int | None  # its usable (free) bytes; None likewise
    partitions: tuple[LogDirPartition, ...]  # by topic, then partition

    @property
    def size_bytes(self) -> int:
        """The bytes of every partition listed."""
        return sum(p.size_bytes for p in self.partitions)


def _bytes(value: int) -> int | None:
    return None if value < 0 else int(value)


class LogDirsAdminMixin:
    async def describe_log_dirs(self, topics: Iterable[str] | Mapping[str, Iterable[int]] | None = None,
                                ) -> list[LogDirDescription]:
        """The log directories of every broker (by broker id, then path), with the size of the
        partitions in them: ``topics`` None for every partition, topic names (every partition of
        each, from metadata) or {topic: partitions}. Partitions a broker does not hold are not
        listed. Raises KafkaException for CLUSTER_AUTHORIZATION_FAILED."""
        cluster = await self._get_cluster()  # type: ignore[attr-defined]
        if topics is None:
            wanted = None
            await cluster.refresh_metadata([])
        elif isinstance(topics, Mapping):
            wanted = [{"topic": t, "partitions": sorted(set(ps))} for t, ps in topics.items()]
            await cluster.refresh_metadata([])
        else:
            names = list(topics)
            await cluster.refresh_metadata(names)
            wanted = []
            for name in names:
                info = cluster.topics.get(name)
                if info is None:
                    raise error_for_code(ErrorCode.unknown_topic_or_partition, f"DescribeLogDirs of topic {name!r}")
                wanted.append({"topic": name, "partitions": sorted(info.partitions)})
        out: list[LogDirDescription] = []
        for node_id in sorted(cluster.brokers):
            conn = await cluster.connection(node_id)
            response = await conn.call(DESCRIBE_LOG_DIRS_KEY, {"topics": wanted}, min_version=1)
            code = getattr(response, "error_code", ErrorCode.none)
            if code != ErrorCode.none:
                raise error_for_code(code, f"DescribeLogDirs on broker {node_id}")
            for r in response.results:
                out.append(LogDirDescription(
                    node_id, r.log_dir, int(r.error_code), _bytes(getattr(r, "total_bytes", -1)),
                    _bytes(getattr(r, "usable_bytes", -1)),
                    tuple(LogDirPartition(t.name, p.partition_index, int(p.partition_size), int(p.offset_lag),
                                          bool(p.is_future_key))
                          for t in sorted(r.topics, key=lambda t: t.name)
                          for p in sorted(t.partitions, key=lambda p: p.partition_index))))
        return sorted(out, key=lambda d: (d.broker_id, d.path))
