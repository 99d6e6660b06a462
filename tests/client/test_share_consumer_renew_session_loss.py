"""RENEW across a broker restart (the share session is gone), against a real embedded broker.

Soak-test regression: a record is RENEWed and the broker confirms it; the broker restarts on the same
data directory and port, which drops the share session and the record's acquisition; the next RENEW
of the record fails. The record is then no longer held by this consumer, as in Kafka's client
(ShareInFlightBatch.renew: a record whose renew acknowledgement completed exceptionally is removed
from renewingRecords and never put back into inFlightRecords, so ShareConsumerImpl.collect's
takeRenewedRecords cannot hand it out, and ShareInFlightBatch.acknowledge throws
IllegalStateException("The record cannot be acknowledged.")):

- the failure is reported by commit_sync and to the acknowledgement commit callback;
- acknowledge(record, ACCEPT) is refused with IllegalStateException;
- the consumer's next poll does not hand the record out again from its renewed records (it used to:
  offset 0, delivery count 1, while another member of the group had meanwhile acquired it).
"""

from __future__ import annotations

import time

import pytest
from support import free_port, produce_batch, set_group_configs

from quafka.client import AcknowledgeType, Admin, IllegalStateException, KafkaException, ShareConsumer, TopicPartition

CONSUMER = {"share.acknowledgement.mode": "explicit", "share.acquire.mode": "record_limit", "max.poll.records": 1,
            "request.timeout.ms": 3000, "default.api.timeout.ms": 3000, "retry.backoff.max.ms": 200}


def _poll_nonempty(consumer: ShareConsumer, timeout_s: float = 20.0) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = consumer.poll(0.5)
        if records:
            return records
    pytest.fail(f"no records within {timeout_s} s")


def test_a_record_whose_renewal_failed_after_a_restart_is_not_delivered_again(tmp_path, make_broker):
    data_dir = str(tmp_path / "data")
    listeners = {"listeners": f"PLAINTEXT://127.0.0.1:{free_port()}"}
    broker = make_broker(data_dir=data_dir, config=listeners)
    bootstrap = broker.bootstrap_servers
    topic, group = "renew-restart", "renew-restart-g"
    tp = TopicPartition(topic, 0)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (1, 1)})
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce_batch(bootstrap, topic, 3)

    owner = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER})
    other = None
    try:
        reported: list[tuple[dict, Exception | None]] = []
        owner.set_acknowledgement_commit_callback(lambda offsets, exc: reported.append((offsets, exc)))
        owner.subscribe([topic])
        [record] = _poll_nonempty(owner)
        assert (record.offset, record.delivery_count) == (0, 1)

        owner.acknowledge(record, AcknowledgeType.RENEW)
        assert owner.commit_sync(5.0) == {tp: None}  # renewed: the next poll would return it again

        broker.stop()  # the share session and the record's acquisition go with the broker
        broker = make_broker(data_dir=data_dir, config=listeners)

        owner.acknowledge(record, AcknowledgeType.RENEW)
        result = owner.commit_sync(5.0)
        assert isinstance(result[tp], KafkaException), result  # the renewal failed
        assert any(offsets == {tp: {0}} and isinstance(exc, KafkaException) for offsets, exc in reported), reported

        # no longer held: acknowledging it is refused (Kafka: ShareInFlightBatch.acknowledge throws)
        with pytest.raises(IllegalStateException, match="offset 0 is not a record delivered"):
            owner.acknowledge(record, AcknowledgeType.ACCEPT)

        # another member acquires the records the restart made available again
        other = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                               "share.acknowledgement.mode": "explicit"})
        other.subscribe([topic])
        held = _poll_nonempty(other)
        assert sorted(r.offset for r in held) == [0, 1, 2], [(r.offset, r.delivery_count) for r in held]

        # the owner's next polls must not hand the record out again from its renewed records (they
        # did: offset 0, delivery count 1, while `other` held it); `other` holds all three records
        # under its lock, so nothing at all may come
        for _ in range(2):
            again = owner.poll(1.0)
            assert not any(r is record for r in again), "the failed renewal's record was handed out again"
            assert again == [], [(r.offset, r.delivery_count) for r in again]
        for r in held:
            other.acknowledge(r, AcknowledgeType.ACCEPT)
        assert other.commit_sync(5.0) == {tp: None}
    finally:
        owner.close(timeout=3)
        if other is not None:
            other.close(timeout=3)
