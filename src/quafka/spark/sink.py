"""The sink of ``df.write.format("quafka")`` and ``df.writeStream.format("quafka")``: each
executor task produces its rows with confluent-kafka's idempotent ``Producer`` (quafka writes no
producer of its own), flushes, and fails the task if any record was not delivered.

Columns (as Spark's Kafka sink): ``value`` (binary or string, required), ``key`` (binary or
string), ``topic`` (string; required when the option ``topic`` is not set, and overridden by
it when set), ``partition`` (int; null lets the producer's partitioner choose), ``headers``
(array<struct<key string, value binary>>). Other columns are refused.

Options: ``kafka.bootstrap.servers`` (required), ``topic``, and ``kafka.*`` passed to the Producer
(prefix removed); ``enable.idempotence`` is always true; ``kafka.transactional.id`` is refused (the
sink derives one per task, below).

Default semantics are at-least-once: ``commit`` only reports the counts; ``abort`` cannot retract
records that tasks already produced (Kafka has no delete of single records), and a retried task or
a rerun micro-batch produces its records again.

``exactlyOnce=true`` (``writeStream`` only; needs the ``topic`` option): each task of micro-batch B
writes its rows in one Kafka transaction (KIP-98) under ``transactional.id =
{transactionalIdPrefix}-{partition id}`` — prefix default ``quafka-spark-{query id}``, the query id
being the one Spark keeps in the checkpoint, so it is the same after a restart — and commits,
inside the same transaction, "batch B done" for that partition as the offset B + 1 of a consumer
group named like the transactional id, on partition 0 of the output topic
(``send_offsets_to_transaction``: Kafka's atomic offsets, KafkaProducer.sendOffsetsToTransaction).
So:

- a retried or speculative attempt of the task (same partition id) calls InitProducerId with the
  same id, which fences the zombie attempt and aborts its open transaction (Kafka's
  TransactionCoordinator.handleInitProducerId);
- then it reads the group's committed offset at read_committed: when it is already past B (the
  earlier attempt committed and died before Spark learned it, or the driver restarted after the
  task committed but before Spark's commit log recorded the batch, so Spark runs batch B again:
  MicroBatchExecution reruns the last batch of the offset log without a commit-log entry), the
  task writes nothing and returns;
- otherwise it produces, adds the offset, and commits; the driver's ``commit(messages, batchId)``
  (DataSourceStreamWriter.commit, Spark's StreamingWrite.commit) only reports.

This relies on what Spark's own exactly-once contract for sinks relies on (ForeachWriter.open's
(partitionId, epochId)): a replayable source and a deterministic query give a rerun batch the same
rows in the same partitions. The cost: a transaction per task per batch (InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn and a control batch per written
partition), one consumer group per task partition, and rows visible to read_committed readers only
when their task commits. A task's transaction lasts as long as the task: keep tasks within the
producer's ``transaction.timeout.ms`` (``kafka.transaction.timeout.ms``, 60 s by default; the
broker's ``transaction.max.timeout.ms`` caps it). Kafka's own Spark connector has no exactly-once
sink; Flink's KafkaSink keeps the transaction open until the checkpoint completes (two-phase commit),
which needs KIP-939 to survive a coordinator-side timeout — here each task commits by itself and
the marker makes the rerun idempotent instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from .options import OptionError, Options

__all__ = ["QuafkaWriter", "QuafkaStreamWriter", "ProducedCommitMessage", "BATCH_ID_PROPERTY", "QUERY_ID_PROPERTY"]

log = logging.getLogger(__name__)

_COLUMNS = ("key", "value", "topic", "partition", "headers")
# the local properties MicroBatchExecution sets for the tasks of a micro-batch (Spark's
# MicroBatchExecution.BATCH_ID_KEY and StreamExecution.QUERY_ID_KEY)
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
TXN_TIMEOUT_S = 60.0


@dataclass
class ProducedCommitMessage(WriterCommitMessage):
    """What one task produced: {"topic-partition": (first offset, count)} and the record count."""

    records: int = 0
    partitions: dict[str, tuple[int, int]] = field(default_factory=dict)
    skipped: bool = False  # exactlyOnce: this partition of the batch was committed before (a rerun)


def _check_schema(options: Options, schema: StructType) -> str | None:
    names = {f.name.lower(): f for f in schema.fields}
    if "value" not in names:
        raise OptionError('format("quafka") writes need a \'value\' column (binary or string); the '
                          f"DataFrame has {', '.join(schema.fieldNames()) or 'no columns'}")
    extra = sorted(set(names) - set(_COLUMNS))
    if extra:
        raise OptionError(f"column {extra[0]!r} is not one of {', '.join(_COLUMNS)} (the columns "
                          'format("quafka") writes)')

    def need(column: str, types: tuple[type, ...], what: str) -> None:
        f = names.get(column)
        if f is not None and not isinstance(f.dataType, types):
            raise OptionError(f"column {column!r} must be {what}, not {f.dataType.simpleString()}")

    need("value", (BinaryType, StringType), "binary or string")
    need("key", (BinaryType, StringType), "binary or string")
    need("topic", (StringType,), "string")
    need("partition", (IntegerType,), "int")
    headers = names.get("headers")
    if headers is not None:
        t = headers.dataType
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType.fields[0].dataType, StringType)
              and isinstance(t.elementType.fields[1].dataType, (BinaryType, StringType)))
        if not ok:
            raise OptionError("column 'headers' must be array<struct<key: string, value: binary>>, not "
                              f"{t.simpleString()}")
    topic = options.get("topic")
    topic = topic.strip() if topic and topic.strip() else None
    if topic is None and "topic" not in names:
        raise OptionError("option 'topic' is missing and the DataFrame has no 'topic' column: "
                          "name the topic to write to")
    return topic


def _bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


class _Producing:
    """The shared part of both writers."""

    streaming = False

    def __init__(self, options: Options, schema: StructType) -> None:
        self.options = options
        self.bootstrap = options.bootstrap_servers()
        self.topic = _check_schema(options, schema)
        self.config = options.client_config()
        self.config["bootstrap.servers"] = self.bootstrap
        self.config["enable.idempotence"] = True
        if "transactional.id" in self.config:
            raise OptionError("option 'kafka.transactional.id' is not taken: the sink derives one transactional.id per "
                              "task from 'transactionalIdPrefix' when 'exactlyOnce' is true (one id for every task "
                              "would make the tasks fence each other)")
        self.exactly_once = _flag(options, "exactlyOnce")
        prefix = options.get("transactionalIdPrefix")
        self.prefix = prefix.strip() if prefix and prefix.strip() else None
        if prefix is not None and not self.exactly_once:
            raise OptionError("option 'transactionalIdPrefix' needs 'exactlyOnce'=true")
        if self.exactly_once and not self.streaming:
            raise OptionError("option 'exactlyOnce' applies to writeStream: a batch write whose job fails after some "
                              "tasks committed cannot retract them (Spark's DataSourceWriter.abort), so df.write is "
                              "at-least-once")
        if self.exactly_once and self.topic is None:
            raise OptionError("option 'exactlyOnce' needs the option 'topic' (the batches each task committed are "
                              "recorded on partition 0 of that topic; a 'topic' column alone does not name one)")

    def write(self, iterator: Iterator[Any]) -> ProducedCommitMessage:
        from confluent_kafka import KafkaException, Producer

        from quafka.client import librdkafka_security_config

        transaction = _TaskTransaction(self) if self.exactly_once else None
        if transaction is not None and transaction.done_before():
            for _ in iterator:  # the rows of a batch this partition committed already: drop them
                pass
            return ProducedCommitMessage(0, {}, skipped=True)
        producer = (transaction.producer if transaction is not None
                    else Producer(librdkafka_security_config(self.config)))
        errors: list[str] = []
        first: dict[str, list[int]] = {}

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{msg.topic()}: {err}")
                return
            key = f"{msg.topic()}-{msg.partition()}"
            slot = first.setdefault(key, [msg.offset(), 0])
            slot[0] = min(slot[0], msg.offset())
            slot[1] += 1

        try:
            count = self._produce_rows(producer, iterator, delivered, errors)
        except BaseException as exc:
            if transaction is not None:
                transaction.abort(f"the task failed: {type(exc).__name__}: {exc}")
            raise
        if transaction is not None:
            producer.flush(TXN_TIMEOUT_S)  # the delivery reports, before the outcome is decided
            if errors:
                transaction.abort(f"{len(errors)} record(s) not delivered")
                raise KafkaException(f"{len(errors)} record(s) not delivered, first: {errors[0]}; the task's "
                                     "transaction is aborted")
            transaction.commit()  # raises on failure: the task fails, Spark retries it
        else:
            remaining = producer.flush(60)
            if errors:
                raise KafkaException(f"{len(errors)} record(s) not delivered, first: {errors[0]}")
            if remaining:
                raise KafkaException(f"{remaining} record(s) still undelivered after a 60 s flush")
        return ProducedCommitMessage(count, {k: (v[0], v[1]) for k, v in first.items()})

    def _produce_rows(self, producer: Any, iterator: Iterator[Any], delivered: Any, errors: list[str]) -> int:
        """Produce every row of ``iterator`` (Arrow record batches); stops early once a delivery failed."""
        count = 0
        for batch in iterator:
            columns = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
            n = batch.num_rows
            values = columns["value"]
            keys = columns.get("key", [None] * n)
            topics = columns.get("topic")
            partitions = columns.get("partition")
            headers = columns.get("headers")
            for i in range(n):
                topic = self.topic or (topics[i] if topics else None)
                if not topic:
                    raise OptionError(f"row {count} has a null 'topic' and option 'topic' is not set")
                kwargs: dict[str, Any] = {}
                if partitions is not None and partitions[i] is not None:
                    kwargs["partition"] = partitions[i]
                if headers is not None and headers[i]:
                    kwargs["headers"] = [(h["key"], _bytes(h["value"])) for h in headers[i]]
                while True:
                    try:
                        producer.produce(topic, value=_bytes(values[i]), key=_bytes(keys[i]),
                                         on_delivery=delivered, **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.1)  # local queue full: serve delivery reports
                count += 1
                if count % 10000 == 0:
                    producer.poll(0)
            if errors:
                break
        return count


def _flag(options: Options, name: str) -> bool:
    value = (options.get(name) or "false").strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name!r}={options.get(name)!r} must be true or false")
    return value == "true"


class _TaskTransaction:
    """One task's transaction of ``exactlyOnce`` (see the module docstring): the transactional
    producer of (query, partition) and the consumer group whose offset on (topic, 0) is the next
    batch this partition has to write."""

    def __init__(self, sink: _Producing) -> None:
        from confluent_kafka import Consumer, Producer
        from pyspark import TaskContext

        from quafka.client import librdkafka_security_config

        context = TaskContext.get()
        if context is None:
            raise RuntimeError("exactlyOnce: write() runs outside a Spark task (no TaskContext)")
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        query = context.getLocalProperty(QUERY_ID_PROPERTY)
        if batch is None or query is None:
            raise RuntimeError(f"exactlyOnce: the task has no {BATCH_ID_PROPERTY}/{QUERY_ID_PROPERTY} local property "
                               "(is this a micro-batch query? continuous triggers are not supported)")
        self.batch_id = int(batch)
        self.partition_id = context.partitionId()
        self.transactional_id = f"{sink.prefix or f'quafka-spark-{query}'}-{self.partition_id}"
        self.marker = sink.topic
        config = librdkafka_security_config(sink.config)
        # the coordinator answers CONCURRENT_TRANSACTIONS while a transaction's markers are being
        # written; librdkafka's default 100 ms before trying again is most of a small task's cost
        self.producer = Producer({"retry.backoff.ms": 10, **config, "transactional.id": self.transactional_id})
        consumer_config = {k: v for k, v in config.items() if k in _CLIENT_KEYS or k.startswith(("ssl.", "sasl."))}
        self.consumer = Consumer({**consumer_config, "group.id": self.transactional_id,
                                  "isolation.level": "read_committed", "enable.auto.commit": False})
        # fences an earlier attempt of this task and ends its transaction (aborts an open one)
        self.producer.init_transactions(TXN_TIMEOUT_S)

    def done_before(self) -> bool:
        """Has this partition of this batch been committed already? Else the transaction begins."""
        from confluent_kafka import TopicPartition

        [committed] = self.consumer.committed([TopicPartition(self.marker, 0)], TXN_TIMEOUT_S)
        if committed.error is not None:
            raise RuntimeError(f"exactlyOnce: reading the committed batches of {self.transactional_id!r}: "
                               f"{committed.error}")
        if committed.offset > self.batch_id:
            log.info("quafka sink: batch %d partition %d was committed before (%r at %d): skipped", self.batch_id,
                     self.partition_id, self.transactional_id, committed.offset)
            self.close()
            return True
        self.producer.begin_transaction()
        return False

    def commit(self) -> None:
        from confluent_kafka import TopicPartition

        self.producer.send_offsets_to_transaction(
            [TopicPartition(self.marker, 0, self.batch_id + 1, f"quafka spark sink batch {self.batch_id}")],
            self.consumer.consumer_group_metadata(), TXN_TIMEOUT_S)
        self.producer.commit_transaction(TXN_TIMEOUT_S)
        self.close()

    def abort(self, why: str) -> None:
        """Discard the task's records (best effort: a later attempt's InitProducerId aborts them too)."""
        from confluent_kafka import KafkaException

        log.warning("quafka sink: batch %d partition %d: transaction of %r aborted: %s", self.batch_id,
                    self.partition_id, self.transactional_id, why)
        try:
            self.producer.abort_transaction(TXN_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("quafka sink: abort of %r failed (%s); the next attempt's InitProducerId ends it",
                        self.transactional_id, exc)
        self.close()

    def close(self) -> None:
        self.consumer.close()


_CLIENT_KEYS = {"bootstrap.servers", "client.id", "security.protocol", "socket.timeout.ms"}


class QuafkaWriter(_Producing, DataSourceArrowWriter):
    """``df.write.format("quafka")``. ``commit`` logs the counts. ``abort`` cannot retract what
    the successful tasks already produced: those records stay in the topic (at-least-once)."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, ProducedCommitMessage))
        log.info("quafka sink: %d record(s) produced by %d task(s)", total, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        produced = sum(m.records for m in messages if isinstance(m, ProducedCommitMessage))
        log.warning("quafka sink: write aborted; %d record(s) already produced stay in the topic "
                    "(Kafka records cannot be retracted)", produced)


class QuafkaStreamWriter(_Producing, DataSourceStreamArrowWriter):
    """``df.writeStream.format("quafka")``: at-least-once by default, a rerun micro-batch (same
    batchId after a restart) produces its records again; with ``exactlyOnce`` each task commits
    its own transaction and a rerun skips what was committed (module docstring). ``abort``
    cannot retract committed records."""

    streaming = True

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, ProducedCommitMessage))
        skipped = sum(1 for m in messages if isinstance(m, ProducedCommitMessage) and m.skipped)
        log.info("quafka sink: batch %d: %d record(s) produced%s", batchId, total,
                 f"; {skipped} task(s) skipped, committed before" if skipped else "")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        produced = sum(m.records for m in messages if isinstance(m, ProducedCommitMessage))
        log.warning("quafka sink: batch %d aborted; %d record(s) already produced stay in the topic "
                    "(Kafka records cannot be retracted)", batchId, produced)
