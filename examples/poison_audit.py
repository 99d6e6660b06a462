"""Poison-record audit: which records of a share group were archived without being accepted.

A share group archives a record when a consumer REJECTs it, or when it has been delivered
``share.delivery.count.limit`` times without being accepted (RELEASEd, or its lock expired each
time). Those are the poison records. This job reads the share-state topic
(``spark.read.format("quafka").option("subscribe", "__share_group_state")``), replays each
group/topic/partition's ShareSnapshot and ShareUpdate records in log order to get every offset's
latest delivery state, keeps the offsets whose state is ARCHIVED (deliveryState 4), joins them with
a batch read of the topic for their key and value, and prints a table.

    python examples/poison_audit.py --bootstrap-server 127.0.0.1:9092 --group job-workers \\
        [--topic jobs]

**Limit.** The share state only keeps per-offset state from the partition's *start offset* on (the
first offset not yet accepted or archived); everything below it has been dropped from the state,
and an archived record there can no longer be told apart from an accepted one. The audit therefore
sees the poison records that sit above the start offset, i.e. while an earlier record of the
partition is still available or in flight. To keep a durable record of poison, write it from the
consumer (e.g. to a dead-letter topic) at the time it is rejected.

``main(argv, spark)`` returns the poison records as sorted ``(topic, partition, offset)`` tuples.
"""

from __future__ import annotations

import argparse
from typing import Any

ARCHIVED = 4


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", default=None, help="only this topic (default: every topic of the group)")
    return p.parse_args(argv)


def latest_states(rows: list[Any]) -> dict[tuple[str, int], tuple[int, dict[int, tuple[int, int]]]]:
    """Replay share-state rows (one group, in log order) into
    ``{(topic, partition): (start offset, {offset: (deliveryState, deliveryCount)})}``."""
    state: dict[tuple[str, int], tuple[int, dict[int, tuple[int, int]]]] = {}
    for r in rows:
        key = (r.topic, r.partition)
        if r.tombstone:
            state.pop(key, None)
            continue
        if r.recordType == "ShareSnapshot":
            start, offsets = r.startOffset, {}
        else:
            start, offsets = state.get(key, (-1, {}))
            offsets = dict(offsets)
            if r.startOffset is not None and r.startOffset >= 0:
                start = r.startOffset
        for b in r.stateBatches or []:
            for o in range(b.firstOffset, b.lastOffset + 1):
                offsets[o] = (b.deliveryState, b.deliveryCount)
        state[key] = (start, {o: s for o, s in offsets.items() if o >= start})
    return state


def main(argv: list[str] | None = None, spark=None) -> list[tuple[str, int, int]]:
    args = parse_args(argv)
    if spark is None:
        from pyspark.sql import SparkSession

        from quafka.spark import use_driver_python

        use_driver_python()  # local master: Spark's Python workers run this interpreter (docs/spark.md)
        spark = SparkSession.builder.appName("quafka-poison-audit").getOrCreate()
    from pyspark.sql import functions as F

    state_df = (spark.read.format("quafka")
                .option("kafka.bootstrap.servers", args.bootstrap_server)
                .option("subscribe", "__share_group_state")
                .load()
                .where(F.col("group") == args.group))
    if args.topic:
        state_df = state_df.where(F.col("topic") == args.topic)
    # One group's state is small: replay it on the driver, in the share-state log's order.
    # __share_group_state has several partitions; a group/topic/partition's records all sit in one,
    # so ordering by (topic, partition, offset) gives each key's records in log order.
    rows = state_df.orderBy("topic", "partition", "offset").collect()
    poison = sorted((topic, partition, offset, count)
                    for (topic, partition), (_, offsets) in latest_states(rows).items()
                    for offset, (delivery_state, count) in offsets.items() if delivery_state == ARCHIVED)
    if not poison:
        print(f"group {args.group}: no archived-but-not-accepted records above the start offsets")
        return []

    poison_df = spark.createDataFrame(poison, "topic STRING, partition INT, offset LONG, deliveryCount INT")
    topics = sorted({p[0] for p in poison})
    records = (spark.read.format("quafka")
               .option("kafka.bootstrap.servers", args.bootstrap_server)
               .option("subscribe", ",".join(topics))
               .load()
               .where(F.col("offset") >= min(p[2] for p in poison))
               .select("topic", "partition", "offset", F.col("key").cast("string").alias("key"),
                       F.col("value").cast("string").alias("value"), "timestamp"))
    report = (poison_df.join(records, ["topic", "partition", "offset"], "left")
              .orderBy("topic", "partition", "offset"))
    print(f"group {args.group}: {len(poison)} poison record(s) (archived without being accepted)")
    report.show(n=max(20, len(poison)), truncate=60)
    return [(t, p, o) for t, p, o, _ in poison]


if __name__ == "__main__":
    main()
