"""Acceptance 4: graceful restart and SIGKILL of the broker while an idempotent acks=all
producer is writing. Every acknowledged record is present exactly once afterwards, the producer
goes on without a fatal error, no corrupt batch is served, and topic ids, partition counts and
altered configs are unchanged. A batch retried across a restart is recognised as a duplicate."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from support import RawClient, wait_until

from quafka.protocol.record_batch import build_batch

TOPIC = "durable"
PARTITIONS = 2


def snapshot(admin: AdminClient):
    described = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(10)
    res = ConfigResource(ResourceType.TOPIC, TOPIC)
    configs = admin.describe_configs([res])[res].result(10)
    return str(described.topic_id), len(described.partitions), configs["retention.ms"].value


def read_all(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                         "check.crcs": True, "enable.partition.eof": False})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    idle_polls = 0
    while time.monotonic() < deadline and idle_polls < 3:
        msgs = consumer.consume(num_messages=10_000, timeout=1.0)
        if not msgs and len(values) >= expected:
            idle_polls += 1
        for m in msgs:
            assert m.error() is None, f"consumer error (corrupt batch?): {m.error()}"
            values.append(m.value())
    consumer.close()
    return values


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_acknowledged_records_survive_restart_exactly_once(tmp_path, how, broker_process):
    broker = broker_process(str(tmp_path / "data"))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(10)
    res = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    before = snapshot(admin)

    fatal = []
    acked: list[bytes] = []
    failed = []

    def on_error(err):
        if err.fatal():
            fatal.append(err)

    def on_delivery(err, msg):
        (failed if err is not None else acked).append(err or msg.value())

    producer = Producer({
        "bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True, "acks": "all",
        "linger.ms": 2, "batch.num.messages": 200, "message.timeout.ms": 120000,
        "retry.backoff.ms": 20, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
        "error_cb": on_error,
    })
    total = 30_000
    restart_at = 12_000
    for i in range(total):
        producer.produce(TOPIC, value=b"%08d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
        producer.poll(0)
        if i == restart_at:
            # records are in flight: some written and acknowledged, some written but not yet
            # acknowledged, some not yet sent
            wait_until(lambda: producer.poll(0.01) is not None and len(acked) > 2000, 30,
                       message="first acknowledgements")
            if how == "sigkill":
                broker.kill()
            else:
                assert broker.stop() == 0
            broker.start()
    assert producer.flush(120) == 0
    assert fatal == [], f"producer hit a fatal error: {fatal}"
    assert failed == []
    assert len(acked) == total

    values = read_all(broker.bootstrap_servers, total)
    assert len(values) == len(set(values)), "a record was written twice"
    assert set(values) == {b"%08d" % i for i in range(total)}
    assert snapshot(AdminClient({"bootstrap.servers": broker.bootstrap_servers})) == before
    broker.stop()


def test_batch_retried_across_sigkill_is_recognised_as_duplicate(tmp_path, broker_process):
    broker = broker_process(str(tmp_path / "data"))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("retry", 1, 1)])["retry"].result(10)
    with RawClient(broker.bootstrap_servers) as raw:
        init = raw.request(InitProducerIdRequest(transactional_id=None, transaction_timeout=timedelta(seconds=60),
                                                 producer_id=-1, producer_epoch=-1))
        assert init.error_code == 0
        pid = init.producer_id

        def produce(seq: int, n: int):
            batch = build_batch([(None, b"r%d" % (seq + i)) for i in range(n)], producer_id=pid,
                                producer_epoch=0, base_sequence=seq, base_timestamp=1000)
            req = ProduceRequest(transactional_id=None, acks=-1, timeout=timedelta(seconds=10), topic_data=(
                TopicProduceData(name="retry", partition_data=(PartitionProduceData(index=0, records=batch),)),))
            return raw.request(req).responses[0].partition_responses[0]

        first = produce(0, 5)
        second = produce(5, 3)
        assert (first.error_code, first.base_offset, second.base_offset) == (0, 0, 5)
    broker.kill()
    broker.start()
    with RawClient(broker.bootstrap_servers) as raw:
        again = produce(5, 3)  # the retry of a batch whose response was "lost"
        assert (again.error_code, again.base_offset) == (0, 5)
        gap = produce(10, 1)
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = produce(8, 2)
        assert (nxt.error_code, nxt.base_offset) == (0, 8)
    broker.stop()
