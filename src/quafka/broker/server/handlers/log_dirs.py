"""DescribeLogDirs (key 35), v1-v5 (Kafka 4.x removed v0): the broker's log directory, the size of
each partition in it, and (v4+) the size and usable space of its file system.

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
"""

from __future__ import annotations

import os

from quafka.broker.core.acl_types import AclOperation
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, response_class


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
