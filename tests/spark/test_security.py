"""format("quafka") over SASL_SSL end to end, with the options docs/spark.md documents (the Java
client's names behind the `kafka.` prefix, as Spark's Kafka source takes them): the sink writes
a few hundred rows through confluent-kafka on the executors, the batch source reads them back by
offset, and the streaming source consumes them through a share group; the broker's SASL_SSL
listener counts the authentications (nothing went over another listener)."""

from __future__ import annotations

import threading
import time

import pytest
from support.secure_broker import SCRAM_PASSWORD, SCRAM_USER, client_config, secure_broker

from quafka.client import Admin

pytestmark = pytest.mark.spark

N = 300


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with secure_broker(tmp_path_factory.mktemp("tls")) as broker:
        yield broker


def _options(broker) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": broker.listener_address("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                  f'username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";',
        "kafka.ssl.truststore.location": broker.ca_file,
        "kafka.ssl.truststore.type": "PEM",
    }


def _authentications(broker) -> int:
    return broker.server.metrics.sasl.get(("SASL_SSL", "successful-authentication"), 0)


def test_sink_batch_read_and_share_group_stream_over_sasl_ssl(spark, secure, tmp_path):
    topic, group = "spark-secure", "spark-secure-g"
    with Admin(client_config(secure, "SASL_SSL", "SCRAM-SHA-512")) as admin:
        admin.create_topics({topic: (2, 1)})
        admin.alter_configs("group", group, {"share.auto.offset.reset": "earliest",
                                             "share.assignment.interval.ms": "0"})
    options = _options(secure)
    before = _authentications(secure)

    writer = spark.createDataFrame([(str(i),) for i in range(N)], "value string").write.format("quafka")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.option("topic", topic).mode("append").save()

    reader = spark.read.format("quafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    read = sorted(int(bytes(r.value)) for r in reader.option("subscribe", topic).load().select("value").collect())
    assert read == list(range(N))

    seen: list[int] = []
    lock = threading.Lock()

    def collect(df, batch_id):
        values = [int(bytes(r.value)) for r in df.select("value").collect()]
        with lock:
            seen.extend(values)

    stream = spark.readStream.format("quafka")
    for k, v in options.items():
        stream = stream.option(k, v)
    query = (stream.option("subscribe", topic).option("share.group", group).load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and query.exception() is None:
            with lock:
                if len(set(seen)) == N:
                    break
            time.sleep(0.2)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert set(seen) == set(range(N))
    # the driver's and the executors' clients all authenticated on the SASL_SSL listener
    assert _authentications(secure) - before >= 3
