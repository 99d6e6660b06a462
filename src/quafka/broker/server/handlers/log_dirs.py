"""DescribeLogDirs (key 35), v1-v5 (Kafka 4.x removed v0): the broker's log directory, the size of
each partition in it, and (v4+) the size and usable space of its file system. AlterReplicaLogDirs
(key 34), v1-v2 (Kafka 4.x removed v0): move replicas between log directories, answered as Kafka
answers it for a broker with one log directory (below).

As Kafka's `KafkaApis.handleDescribeLogDirsRequest`: DESCRIBE on the CLUSTER is needed, else the
answer holds no log directory and (v3+) CLUSTER_AUTHORIZATION_FAILED; null topics ask for every
partition the broker has (internal topics too), named topics for the partitions listed, and a
partition or topic the broker does not have is left out (no error), as `ReplicaManager.describeLogDirs`
filters the logs it holds by the partitions asked for.

quafka has one log directory. Per partition: its size in bytes (every segment, as Kafka's
`UnifiedLog.size`), offset lag 0 (one node: the high watermark is the log end offset, and there
is never a future log, so `is_future_key` is false). TotalBytes/UsableBytes are measured when asked
(one `statvfs`, the same measurement as the free-space watermark: server/disk_space.py), as Kafka
reads its `FileStore.getTotalSpace`/`getUsableSpace`; -1 when the file system cannot be measured.
A failed (offline) log directory answers KAFKA_STORAGE_ERROR with no topics, as Kafka answers
an offline one. IsCordoned (v5) is false: quafka has no cordoned log directories. A broker
storing in memory (tests) has no log directory: its answer lists none.

AlterReplicaLogDirs, as `KafkaApis.handleAlterReplicaLogDirsRequest` and
`ReplicaManager.alterReplicaLogDirs`: ALTER on the CLUSTER, else every partition named answers
CLUSTER_AUTHORIZATION_FAILED. Per partition (a partition named under two paths takes the last):
a topic name too long for Kafka's future-log directory name (`UnifiedLog.logFutureDirName`, over
255 characters) is INVALID_TOPIC_EXCEPTION; a path that is not the configured log directory
(compared as an absolute path, as `LogManager.isLogDirOnline` does) LOG_DIR_NOT_FOUND, and every
path is that on a broker storing in memory; a failed log directory KAFKA_STORAGE_ERROR; a partition
the broker does not have REPLICA_NOT_AVAILABLE (Kafka's NotLeaderOrFollower, kept for
compatibility); otherwise NONE and nothing moves, since the replica already lives in the only
directory there is (`Partition.maybeCreateFutureReplica` skips the move to its own directory).
"""

from __future__ import annotations

import logging
import os

from quafka.broker.core.acl_types import AclOperation
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, response_class

log = logging.getLogger("quafka.server")

# Kafka's future-log directory: "<topic>-<partition>.<32 hex digits>-future" (UnifiedLog.logFutureDirName)
_FUTURE_DIR_SUFFIX_LEN = 1 + 32 + len("-future")


def wanted_partitions(topics, have: dict[str, int]) -> dict[str, list[int]]:
    """{topic: partition indexes} asked for that the broker has (`have`: topic -> partition
    count); `topics` None asks for all of them."""
    if topics is None:
        return {name: list(range(count)) for name, count in have.items()}
    out: dict[str, set[int]] = {}
    for t in topics:
        count = have.get(t.topic)
        if count is not None:
            out.setdefault(t.topic, set()).update(p for p in t.partitions if 0 <= p < count)
    return {name: sorted(indexes) for name, indexes in out.items() if indexes}


@handles(35, 1, 5)
async def handle_describe_log_dirs(ctx, req):
    server = ctx.server
    resp_cls = response_class(35, ctx.api_version)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    results=())
    log_dir = getattr(server.state.log_store, "log_dir", None)
    if log_dir is None:  # a memory store: no log directory to describe
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=())
    result_cls = item_class(resp_cls, "results")
    path = os.path.abspath(log_dir)
    if server.failed_log_dir is not None:
        result = make(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=path, topics=(),
                      total_bytes=-1, usable_bytes=-1, is_cordoned=False)
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,))
    topics = server.state.topics
    wanted = wanted_partitions(req.topics, {name: len(t.partitions) for name, t in topics.items()})
    topic_cls = item_class(result_cls, "topics")
    partition_cls = item_class(topic_cls, "partitions")
    described = tuple(
        make(topic_cls, name=name, partitions=tuple(
            make(partition_cls, partition_index=i, partition_size=topics[name].partitions[i].log.size_bytes,
                 offset_lag=0, is_future_key=False) for i in indexes))
        for name, indexes in sorted(wanted.items()))
    total_bytes, usable_bytes = server.disk_space.measured_bytes() if ctx.api_version >= 4 else (-1, -1)
    result = make(result_cls, error_code=ErrorCode.none, log_dir=path, topics=described,
                  total_bytes=total_bytes, usable_bytes=usable_bytes, is_cordoned=False)
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,))


def _alter_error(server, log_dir: str | None, topic: str, partition: int, path: str) -> ErrorCode:
    if len(f"{topic}-{partition}") + _FUTURE_DIR_SUFFIX_LEN > 255:
        return ErrorCode.invalid_topic_exception
    if log_dir is None or path != os.path.abspath(log_dir):
        return ErrorCode.log_dir_not_found
    if server.failed_log_dir is not None:
        return ErrorCode.kafka_storage_error
    t = server.state.topics.get(topic)
    if t is None or not 0 <= partition < len(t.partitions):
        return ErrorCode.replica_not_available
    return ErrorCode.none


@handles(34, 1, 2)
async def handle_alter_replica_log_dirs(ctx, req):
    server = ctx.server
    resp_cls = response_class(34, ctx.api_version)
    topic_cls = item_class(resp_cls, "results")
    partition_cls = item_class(topic_cls, "partitions")
    if not authorize_cluster(ctx, AclOperation.ALTER):
        # AlterReplicaLogDirsRequest.getErrorResponse: each directory's topics, as asked
        return make(resp_cls, throttle_time=NO_THROTTLE, results=tuple(
            make(topic_cls, topic_name=t.name, partitions=tuple(
                make(partition_cls, partition_index=p, error_code=ErrorCode.cluster_authorization_failed)
                for p in t.partitions))
            for d in req.dirs for t in d.topics))
    destination: dict[tuple[str, int], str] = {}
    for d in req.dirs:
        for t in d.topics:
            for p in t.partitions:
                destination[(t.name, p)] = d.path
    log_dir = getattr(server.state.log_store, "log_dir", None)
    by_topic: dict[str, list] = {}
    for (topic, partition), path in destination.items():
        error = _alter_error(server, log_dir, topic, partition, path)
        if error != ErrorCode.none:
            log.warning("AlterReplicaLogDirs from %s: %s-%d to %r: %s", ctx.peer, topic, partition, path,
                        error.name)
        by_topic.setdefault(topic, []).append(make(partition_cls, partition_index=partition, error_code=error))
    return make(resp_cls, throttle_time=NO_THROTTLE, results=tuple(
        make(topic_cls, topic_name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()))
