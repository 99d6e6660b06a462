"""The sink of ``df.write.format("quafka")`` and ``df.writeStream.format("quafka")``: each
executor task produces its rows with confluent-kafka's idempotent ``Producer`` (quafka writes no
producer of its own), flushes, and fails the task if any record was not delivered.

Columns (as Spark's Kafka sink): ``value`` (binary or string, required), ``key`` (binary or
string), ``topic`` (string; required when the option ``topic`` is not set, and overridden by
it when set), ``partition`` (int; null lets the producer's partitioner choose), ``headers``
(array<struct<key string, value binary>>). Other columns are refused.

Options: ``kafka.bootstrap.servers`` (required), ``topic``, and ``kafka.*`` passed to the Producer
(prefix removed); ``enable.idempotence`` is always true.

Semantics are at-least-once: ``commit`` only reports the counts; ``abort`` cannot retract records
that tasks already produced (Kafka has no delete of single records), and a retried task or a
rerun micro-batch produces its records again.
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

__all__ = ["QuafkaWriter", "QuafkaStreamWriter", "ProducedCommitMessage"]

log = logging.getLogger(__name__)

_COLUMNS = ("key", "value", "topic", "partition", "headers")


@dataclass
class ProducedCommitMessage(WriterCommitMessage):
    """What one task produced: {"topic-partition": (first offset, count)} and the record count."""

    records: int = 0
    partitions: dict[str, tuple[int, int]] = field(default_factory=dict)


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

    def __init__(self, options: Options, schema: StructType) -> None:
        self.options = options
        self.bootstrap = options.bootstrap_servers()
        self.topic = _check_schema(options, schema)
        self.config = options.client_config()
        self.config["bootstrap.servers"] = self.bootstrap
        self.config["enable.idempotence"] = True

    def write(self, iterator: Iterator[Any]) -> ProducedCommitMessage:
        from confluent_kafka import KafkaException, Producer

        from quafka.client import librdkafka_security_config

        producer = Producer(librdkafka_security_config(self.config))
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
        remaining = producer.flush(60)
        if errors:
            raise KafkaException(f"{len(errors)} record(s) not delivered, first: {errors[0]}")
        if remaining:
            raise KafkaException(f"{remaining} record(s) still undelivered after a 60 s flush")
        return ProducedCommitMessage(count, {k: (v[0], v[1]) for k, v in first.items()})


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
    """``df.writeStream.format("quafka")``: at-least-once, a rerun micro-batch (same batchId after
    a restart) produces its records again. ``abort`` cannot retract produced records."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, ProducedCommitMessage))
        log.info("quafka sink: batch %d: %d record(s) produced", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        produced = sum(m.records for m in messages if isinstance(m, ProducedCommitMessage))
        log.warning("quafka sink: batch %d aborted; %d record(s) already produced stay in the topic "
                    "(Kafka records cannot be retracted)", batchId, produced)
