"""Dead-letter queues of share groups (KIP-1191, Kafka 4.4) with confluent-kafka ShareConsumers.

Kafka's behaviour followed (its `ShareConsumerDLQTest` and `SharePartition`): REJECT, RELEASE at
the delivery limit and a lock expiring at the limit write the record to the group's
`errors.deadletterqueue.topic.name`, one DLQ record per offset with the `__dlq.errors.*` headers,
on partition `source partition % DLQ partitions`, key and value copied only with
`errors.deadletterqueue.copy.record.enable`; a DLQ that fails validation (`ShareGroupDLQStateManager
.validateDlqTopic`) archives the records without a copy and the group keeps working.
"""

from __future__ import annotations

import time

from confluent_kafka import AcknowledgeType

from support import set_group_configs, wait_until
from support.dlq import DLQ_TOPIC_CONFIGS, consume_and_ack, headers_of, produce, read_all, share_consumer
from support.share_client import create_topic

from quafka.broker.core.record_state import RecordState
from quafka.protocol.dead_letter_headers import (
    HEADER_DELIVERY_COUNT,
    HEADER_GROUP,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_REASON,
    HEADER_TOPIC,
    KAFKA_HEADERS,
    MESSAGE_CLIENT_REJECT,
    MESSAGE_DELIVERY_COUNT_EXCEEDED,
)

def share_record(broker, group: str, topic: str, offset: int, partition: int = 0):
    def read():
        for (g, _tid, p), ctx in broker.server.share_partitions.contexts.items():
            if g == group and p == partition and ctx.topic.name == topic:
                return ctx.share_partition.record(offset), ctx.share_partition.start_offset
        return None, None
    return broker.call(read)


def dlq_counts(broker, group: str) -> list[int]:
    return broker.call(lambda: list(broker.server.metrics.dead_letters.get(group, [0, 0, 0])))


# ----------------------------------------------------------------------------- acceptance 1

def test_reject_writes_one_headers_only_record_per_offset(make_broker):
    broker = make_broker()
    bs = broker.bootstrap_servers
    create_topic(bs, "orders", 1)
    create_topic(bs, "dlq.orders", 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": "dlq.orders"})
    produce(bs, "orders", [(b"k%d" % i, b"v%d" % i, [("h", b"x")]) for i in range(5)])
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["orders"])
    try:
        consume_and_ack(consumer, 5, lambda m: AcknowledgeType.REJECT)
        letters = read_all(bs, "dlq.orders", expect=5)
    finally:
        consumer.close()
    by_offset = {int(headers_of(m)[HEADER_OFFSET]): m for m in letters}
    assert sorted(by_offset) == [0, 1, 2, 3, 4]
    for offset, msg in by_offset.items():
        headers = headers_of(msg)
        assert [k for k, _ in msg.headers()][:6] == list(KAFKA_HEADERS)
        assert headers[HEADER_TOPIC] == "orders" and headers[HEADER_PARTITION] == "0"
        assert headers[HEADER_GROUP] == "g" and headers[HEADER_DELIVERY_COUNT] == "1"
        assert headers[HEADER_MESSAGE] == MESSAGE_CLIENT_REJECT and headers[HEADER_REASON] == "rejected"
        assert msg.key() is None and msg.value() is None  # copy.record.enable is false by default
        assert abs(msg.timestamp()[1] - time.time() * 1000) < 60_000  # the broker's clock when written
    wait_until(lambda: share_record(broker, "g", "orders", 0)[1] == 5, message="start offset past the rejects")
    assert dlq_counts(broker, "g")[0] == 5 and dlq_counts(broker, "g")[2] == 0


def test_copy_record_copies_key_and_value_and_the_partition_is_the_source_index_modulo(make_broker):
    broker = make_broker()
    bs = broker.bootstrap_servers
    create_topic(bs, "src", 3)
    create_topic(bs, "dlq.src", 2, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": "dlq.src",
                                "errors.deadletterqueue.copy.record.enable": "true"})
    for partition in range(3):
        produce(bs, "src", [(b"key-%d" % partition, b"value-%d" % partition, [("orig", b"1")])], partition=partition)
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["src"])
    try:
        consume_and_ack(consumer, 3, lambda m: AcknowledgeType.REJECT)
        letters = read_all(bs, "dlq.src", partitions=(0, 1), expect=3)
    finally:
        consumer.close()
    for msg in letters:
        source_partition = int(headers_of(msg)[HEADER_PARTITION])
        assert msg.partition() == source_partition % 2
        assert msg.key() == b"key-%d" % source_partition and msg.value() == b"value-%d" % source_partition
        assert "orig" not in headers_of(msg)  # Kafka copies key and value, not the source's headers


def test_release_until_the_limit_and_lock_expiry_at_the_limit_go_to_the_dlq(make_broker):
    broker = make_broker(config={"group.share.min.record.lock.duration.ms": 1000})
    bs = broker.bootstrap_servers
    create_topic(bs, "jobs", 1)
    create_topic(bs, "dlq.jobs", 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": "dlq.jobs",
                                "share.delivery.count.limit": "2", "share.record.lock.duration.ms": "1000"})
    produce(bs, "jobs", [(None, b"released", None)])
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["jobs"])
    try:
        consume_and_ack(consumer, 2, lambda m: AcknowledgeType.RELEASE)  # delivered twice, released twice
        released = read_all(bs, "dlq.jobs", expect=1)[0]
        assert headers_of(released)[HEADER_MESSAGE] == MESSAGE_DELIVERY_COUNT_EXCEEDED
        assert headers_of(released)[HEADER_REASON] == "released-at-limit"
        assert headers_of(released)[HEADER_DELIVERY_COUNT] == "2"
    finally:
        consumer.close()
    # a record whose lock expires twice: two consumers each take it and never acknowledge it
    produce(bs, "jobs", [(None, b"held", None)])
    holders = []
    try:
        for _ in range(2):
            holder = share_consumer(bs, "g")
            holder.subscribe(["jobs"])
            holders.append(holder)
            wait_until(lambda h=holder: [m for m in h.poll(0.2) if m.error() is None], 20,
                       message="the record delivered again once its lock expired")
        letters = read_all(bs, "dlq.jobs", expect=2)
    finally:
        for holder in holders:
            holder.close()
    expired = next(m for m in letters if headers_of(m)[HEADER_OFFSET] == "1")
    assert headers_of(expired)[HEADER_REASON] == "lock-expired-at-limit"
    assert headers_of(expired)[HEADER_MESSAGE] == MESSAGE_DELIVERY_COUNT_EXCEEDED
    wait_until(lambda: share_record(broker, "g", "jobs", 1)[1] == 2, message="both archived")


def test_an_auto_created_dlq_opts_in_and_pins_create_time(make_broker):
    broker = make_broker(config={"errors.deadletterqueue.auto.create.topics.enable": True})
    bs = broker.bootstrap_servers
    create_topic(bs, "in", 1)
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": "dlq.auto"})
    produce(bs, "in", [(None, b"x", None)])
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["in"])
    try:
        consume_and_ack(consumer, 1, lambda m: AcknowledgeType.REJECT)
        read_all(bs, "dlq.auto", expect=1)
    finally:
        consumer.close()
    configs = broker.call(lambda: dict(broker.server.state.topics["dlq.auto"].configs))
    assert configs == {"errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"}


# ----------------------------------------------------------------------------- acceptance 3

def test_a_dlq_that_fails_validation_archives_without_a_copy_and_the_group_keeps_working(make_broker, caplog):
    broker = make_broker()
    bs = broker.bootstrap_servers
    create_topic(bs, "t", 1)
    create_topic(bs, "dlq.not-opted-in", 1)
    create_topic(bs, "wrong.prefix", 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest"})
    cases = [  # (topic name, Kafka's message)
        ("dlq.not-opted-in", "DLQ is not enabled on configured DLQ topic for share group: g, topic: dlq.not-opted-in."),
        ("dlq.missing", "DLQ topic does not exist and auto create is disabled on cluster for share group: g, "
                        "topic: dlq.missing."),
        ("wrong.prefix", "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: g, "
                         "topic: wrong.prefix, prefix: dlq.."),
    ]
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["t"])
    try:
        for index, (dlq, message) in enumerate(cases):
            set_group_configs(bs, "g", {"errors.deadletterqueue.topic.name": dlq})
            produce(bs, "t", [(None, b"r%d" % index, None)])
            consume_and_ack(consumer, 1, lambda m: AcknowledgeType.REJECT)
            wait_until(lambda i=index: share_record(broker, "g", "t", i)[1] == i + 1,
                       message=f"offset {index} archived although {dlq} is refused")
            wait_until(lambda m=message: m in caplog.text, message=f"the log says: {message}")
        produce(bs, "t", [(None, b"ok", None)])  # the group still works: a record is delivered and accepted
        consume_and_ack(consumer, 1, lambda m: AcknowledgeType.ACCEPT)
    finally:
        consumer.close()
    assert dlq_counts(broker, "g") == [0, 0, 0]  # no meter counts a refused configuration
    assert "dlq.missing" not in broker.call(lambda: set(broker.server.state.topics))


def test_bad_dlq_names_are_refused_when_configured(broker):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[
        ConfigEntry("errors.deadletterqueue.topic.name", "__internal", incremental_operation=AlterConfigOpType.SET)])
    future = admin.incremental_alter_configs([resource])[resource]
    try:
        future.result(timeout=10)
    except Exception as exc:  # KafkaException(INVALID_CONFIG)
        assert "INVALID_CONFIG" in str(exc) or "must not start with '__'" in str(exc)
        assert "errors.deadletterqueue.topic.name" in str(exc)
    else:
        raise AssertionError("a DLQ topic name starting with __ was accepted")


def test_share_version_1_archives_rejects_as_before(make_broker):
    import datetime

    from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
    from support import RawClient

    broker = make_broker()
    bs = broker.bootstrap_servers
    with RawClient(bs) as raw:  # kafka-features.sh downgrade --feature share.version=1
        resp = raw.request(UpdateFeaturesRequest(timeout=datetime.timedelta(seconds=5), validate_only=False,
                                                 feature_updates=(FeatureUpdateKey(feature="share.version", max_version_level=1, upgrade_type=2),)))
    assert resp.results[0].error_code == 0
    create_topic(bs, "t", 1)
    create_topic(bs, "dlq.t", 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": "dlq.t"})
    produce(bs, "t", [(None, b"x", None)])
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["t"])
    try:
        consume_and_ack(consumer, 1, lambda m: AcknowledgeType.REJECT)
        wait_until(lambda: share_record(broker, "g", "t", 0)[1] == 1, message="archived")
    finally:
        consumer.close()
    assert dlq_counts(broker, "g") == [0, 0, 0]
    assert broker.call(lambda: broker.server.state.topics["dlq.t"].partitions[0].log.log_end_offset) == 0
    assert RecordState.ARCHIVING not in broker.call(
        lambda: {r.state for c in broker.server.share_partitions.contexts.values() for r in c.share_partition.runs})


def test_a_dead_letter_over_the_dlq_topic_max_message_bytes_is_a_failed_produce_and_archived(make_broker):
    """Kafka sends a record that alone exceeds the DLQ's max.message.bytes, the broker refuses it
    with MESSAGE_TOO_LARGE, the failed-produce meter moves and the record is archived
    (ShareGroupDLQStateManager.handleProduceResponse). A copy too large falls back to headers-only
    first: here even the headers do not fit."""
    broker = make_broker()
    bs = broker.bootstrap_servers
    create_topic(bs, "big", 1)
    create_topic(bs, "dlq.small", 1, {**DLQ_TOPIC_CONFIGS, "max.message.bytes": "100"})
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": "dlq.small",
                                "errors.deadletterqueue.copy.record.enable": "true"})
    produce(bs, "big", [(None, b"x" * 5000, None)])
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["big"])
    try:
        consume_and_ack(consumer, 1, lambda m: AcknowledgeType.REJECT)
        wait_until(lambda: dlq_counts(broker, "g") == [0, 1, 1], message="one failed DLQ produce")
        wait_until(lambda: share_record(broker, "g", "big", 0)[1] == 1, message="archived regardless")
    finally:
        consumer.close()
    assert broker.call(lambda: broker.server.state.topics["dlq.small"].partitions[0].log.log_end_offset) == 0


# ----------------------------------------------------------------------------- acceptance 4

def test_dead_letters_are_listed_with_reasons_redriven_once_and_processed_again(make_broker):
    """The broker's own dead letters (headers-only: the originals are fetched from the source
    topic), listed with their reasons, redriven to the source topic, and consumed once more by
    the same share group; a second redrive sends nothing."""
    from quafka.client import Admin

    broker = make_broker(config={"group.share.min.record.lock.duration.ms": 1000})
    bs = broker.bootstrap_servers
    create_topic(bs, "work", 1)
    create_topic(bs, "dlq.work", 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": "dlq.work",
                                "share.delivery.count.limit": "2", "share.record.lock.duration.ms": "1000"})
    produce(bs, "work", [(b"k%d" % i, b"job-%d" % i, [("trace", b"t%d" % i)]) for i in range(4)])
    plan = {b"job-0": AcknowledgeType.REJECT, b"job-1": AcknowledgeType.RELEASE, b"job-2": AcknowledgeType.ACCEPT,
            b"job-3": AcknowledgeType.REJECT}
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["work"])
    try:
        consume_and_ack(consumer, 5, lambda m: plan[m.value()])  # job-1 is delivered twice
        read_all(bs, "dlq.work", expect=3)
        with Admin({"bootstrap.servers": bs}) as admin:
            letters = admin.list_dead_letters("g")  # the DLQ topic from the group's config
            assert sorted((d.offset, d.reason, d.delivery_count) for d in letters) == [
                (0, "rejected", 1), (1, "released-at-limit", 2), (3, "rejected", 1)]
            first = admin.redrive_dead_letters("g", "dlq.work")
            assert sorted((i.letter.offset, i.status, i.payload) for i in first.planned) == [
                (0, "sent", "source"), (1, "sent", "source"), (3, "sent", "source")]
            second = admin.redrive_dead_letters("g", "dlq.work")
            assert [i.status for i in second.planned] == ["already-redriven"] * 3
        again = consume_and_ack(consumer, 3, lambda m: AcknowledgeType.ACCEPT)
        assert sorted(m.value() for m in again) == [b"job-0", b"job-1", b"job-3"]
        for msg in again:
            headers = headers_of(msg)
            assert headers["trace"] == "t" + msg.value().decode()[-1]  # the original's headers
            assert headers["quafka.redrive.dlq.topic"] == "dlq.work"
        assert list(consumer.poll(1.0)) == []  # nothing more: no duplicate
    finally:
        consumer.close()
