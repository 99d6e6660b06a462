"""Share groups and transactions over loopback (issue 31, acceptance 5): at
`share.isolation.level=read_committed` a share group delivers only records below the last stable
offset and never the records of aborted transactions; at read_uncommitted it delivers every data
record; at both levels transaction markers (control batches) are never delivered.

Kafka: the share fetch reads with FetchIsolation.TXN_COMMITTED when the group is read_committed
(`SharePartitionManager` / `ShareFetchUtils`), and `SharePartition.acquire` archives the batches of
aborted transactions (`filterAbortedTransactionalAcquiredRecords`). Kafka acquires markers and its
clients acknowledge their offsets as GAP; quafka archives them at acquisition (the same end state).

The transactions are written as the coordinator writes them (support/txn.py: raw transactional
batches, then `write_txn_markers`); the consumers are confluent-kafka's ShareConsumer and quafka's.
"""

from __future__ import annotations

import time

from confluent_kafka import ShareConsumer as ConfluentShareConsumer

from support import RawClient, set_group_configs, wait_until
from support.share_client import ShareClient, acquired_offsets
from support.txn import init_producer_id, install_verifier, produce, txn_batch, write_markers

from quafka.client import AcknowledgeType, ShareConsumer
from quafka.protocol.record_batch import build_batch

from .test_transactions_log import create

TOPIC = "orders"


def write_transactions(broker) -> int:
    """0-1 committed (A), 2 plain, 3-4 aborted (B), 5 plain; markers after each transaction; then
    C (one record) left open, and a plain record after it. Returns C's producer id."""
    create(broker, TOPIC)
    install_verifier(broker)
    tp = [(TOPIC, 0)]
    with RawClient(broker.bootstrap_servers) as raw:
        a = init_producer_id(raw)
        b = init_producer_id(raw)
        c = init_producer_id(raw)
        assert produce(raw, TOPIC, txn_batch([b"a1", b"a2"], a, 0), transactional_id="ta").error_code == 0
        write_markers(broker, a, 0, True, tp)
        assert produce(raw, TOPIC, build_batch([(None, b"p1")], base_timestamp=1000),
                       transactional_id=None).error_code == 0
        assert produce(raw, TOPIC, txn_batch([b"b1", b"b2"], b, 0), transactional_id="tb").error_code == 0
        write_markers(broker, b, 0, False, tp)
        assert produce(raw, TOPIC, build_batch([(None, b"p2")], base_timestamp=1000),
                       transactional_id=None).error_code == 0
        assert produce(raw, TOPIC, txn_batch([b"c1"], c, 0), transactional_id="tc").error_code == 0
        assert produce(raw, TOPIC, build_batch([(None, b"p3")], base_timestamp=1000),
                       transactional_id=None).error_code == 0
    return c


def values_of(consumer_poll, *, want: int, quiet_s: float = 1.5) -> list[bytes]:
    """Poll (accepting each record) until `want` values arrived, then on for `quiet_s` to see that
    nothing more comes."""
    got: list[bytes] = []
    wait_until(lambda: got.extend(consumer_poll()) or len(got) >= want, timeout_s=20)
    end = time.monotonic() + quiet_s
    while time.monotonic() < end:
        got.extend(consumer_poll())
    return got


def quafka_poll(consumer):
    def poll():
        records = consumer.poll(0.2)
        for r in records:
            consumer.acknowledge(r)
        if records:
            consumer.commit_sync(10)
        return [r.value for r in records]
    return poll


def confluent_poll(consumer):
    def poll():
        messages = [m for m in consumer.poll(0.2) if m.error() is None]
        for m in messages:
            consumer.acknowledge(m)
        if messages:
            consumer.commit_sync(10)
        return [m.value() for m in messages]
    return poll


def test_read_committed_share_group_stops_at_the_lso_and_never_delivers_aborted_records(broker):
    c = write_transactions(broker)
    bootstrap = broker.bootstrap_servers
    set_group_configs(bootstrap, "committed", {"share.auto.offset.reset": "earliest",
                                               "share.isolation.level": "read_committed"})
    consumer = ConfluentShareConsumer({"bootstrap.servers": bootstrap, "group.id": "committed",
                                       "share.acknowledgement.mode": "explicit", "log_level": 3})
    try:
        consumer.subscribe([TOPIC])
        poll = confluent_poll(consumer)
        # C is open: the LSO is its first offset; p3 after it waits too
        assert values_of(poll, want=4) == [b"a1", b"a2", b"p1", b"p2"]
        write_markers(broker, c, 0, True, [(TOPIC, 0)])
        assert values_of(poll, want=2) == [b"c1", b"p3"]
    finally:
        consumer.close()


def test_read_uncommitted_share_group_delivers_every_data_record_and_no_marker(broker):
    write_transactions(broker)
    bootstrap = broker.bootstrap_servers
    set_group_configs(bootstrap, "everything", {"share.auto.offset.reset": "earliest"})
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "everything",
                        "share.acknowledgement.mode": "explicit"}) as consumer:
        consumer.subscribe([TOPIC])
        got = values_of(quafka_poll(consumer), want=8)
    assert got == [b"a1", b"a2", b"p1", b"b1", b"b2", b"p2", b"c1", b"p3"]
    # on the wire: a member of another group is handed every offset but the two markers (2 and 6)
    set_group_configs(bootstrap, "raw", {"share.auto.offset.reset": "earliest"})
    with ShareClient(bootstrap, "raw", timeout_s=30) as member:
        member.join([TOPIC])
        member.wait_for_assignment()
        offsets: list[int] = []

        def fetched():
            for acquired in acquired_offsets(member.fetch(max_wait_ms=100)).values():
                offsets.extend(o for o, _ in acquired)
            return len(offsets) >= 8
        wait_until(fetched, timeout_s=20)
    assert sorted(offsets) == [0, 1, 3, 4, 5, 7, 8, 9]


def test_a_group_turned_read_committed_archives_released_records_of_an_aborted_transaction(broker):
    write_transactions(broker)
    bootstrap = broker.bootstrap_servers
    set_group_configs(bootstrap, "switch", {"share.auto.offset.reset": "earliest"})
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "switch",
                        "share.acknowledgement.mode": "explicit"}) as consumer:
        consumer.subscribe([TOPIC])
        seen: list = []
        wait_until(lambda: seen.extend(consumer.poll(0.2)) or len(seen) >= 8, timeout_s=20)
        for r in seen:
            consumer.acknowledge(r, AcknowledgeType.RELEASE)
        consumer.commit_sync(10)
        set_group_configs(bootstrap, "switch", {"share.isolation.level": "read_committed"})
        got = values_of(quafka_poll(consumer), want=4)
    # the open transaction C holds the LSO at its first offset: c1 and p3 stay behind it
    assert got == [b"a1", b"a2", b"p1", b"p2"]
