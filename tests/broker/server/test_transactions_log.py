"""The log side of transactions over loopback: transactional batches, COMMIT/ABORT markers
(write_txn_markers), the last stable offset, Fetch at read_committed with the aborted
transactions, ListOffsets at read_committed, and a read_committed confluent-kafka consumer.

Until the coordinator exists, the raw producer uses an idempotent producer id (InitProducerId
without a transactional id), sends transactional batches with a transactional id, and the test
writes the markers as the coordinator will (support/txn.py).
"""

from __future__ import annotations

import threading

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from support import RawClient, wait_until
from support.txn import (
    READ_COMMITTED, READ_UNCOMMITTED, fetch, init_producer_id, install_verifier, list_offset, produce, txn_batch,
    write_markers,
)

from quafka.protocol.control_batches import ControlType, decode_end_txn_marker
from quafka.protocol.errors import ErrorCode
from quafka.protocol.record_batch import build_batch, iter_headers, iter_records

LATEST = -1


def create(broker, name, partitions=1, config=None):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(10)


def offsets_of(records) -> list[int]:
    return [h.base_offset for _, h in iter_headers(records or b"")]


def test_read_committed_fetch_stops_at_the_lso_until_the_commit_marker(broker):
    create(broker, "t")
    verifier = install_verifier(broker)
    with RawClient(broker.bootstrap_servers) as raw:
        pid = init_producer_id(raw)
        assert produce(raw, "t", build_batch([(None, b"plain")], base_timestamp=1000), transactional_id=None) \
            .error_code == 0
        resp = produce(raw, "t", txn_batch([b"a0", b"a1", b"a2"], pid, 0, timestamp_ms=2000))
        assert resp.error_code == 0 and resp.base_offset == 1
        assert verifier.calls == [("tx", pid, 0, (("t", 0),))]  # KIP-890: asked before the append

        committed = fetch(raw, "t", 0, READ_COMMITTED)
        assert committed.high_watermark == 4 and committed.last_stable_offset == 1
        assert offsets_of(committed.records) == [0] and list(committed.aborted_transactions) == []
        at_lso = fetch(raw, "t", 1, READ_COMMITTED)
        assert at_lso.error_code == 0 and not at_lso.records
        uncommitted = fetch(raw, "t", 0, READ_UNCOMMITTED)
        assert offsets_of(uncommitted.records) == [0, 1] and uncommitted.last_stable_offset == 1
        assert list_offset(raw, "t", LATEST, READ_COMMITTED) == 1  # Partition.fetchOffsetForTimestamp
        assert list_offset(raw, "t", LATEST, READ_UNCOMMITTED) == 4
        assert list_offset(raw, "t", 0, READ_COMMITTED) == 0  # by timestamp: only below the LSO
        assert list_offset(raw, "t", 1500, READ_UNCOMMITTED) == 1
        assert list_offset(raw, "t", 1500, READ_COMMITTED) == -1  # found at 1, not below the LSO

        assert write_markers(broker, pid, 0, True, [("t", 0)]) == {("t", 0): ErrorCode.none}
        after = fetch(raw, "t", 0, READ_COMMITTED)
        assert after.last_stable_offset == 5 and after.high_watermark == 5
        assert offsets_of(after.records) == [0, 1, 4] and list(after.aborted_transactions) == []
        assert list_offset(raw, "t", LATEST, READ_COMMITTED) == 5
        assert list_offset(raw, "t", 1500, READ_COMMITTED) == 1
    marker = [h for _, h in iter_headers(after.records)][-1]
    assert marker.is_control and marker.is_transactional and marker.producer_id == pid and marker.base_sequence == -1
    decoded = decode_end_txn_marker(after.records[-marker.size_bytes:])
    assert decoded.control_type == ControlType.COMMIT and decoded.offset == 4


def test_abort_marker_lists_the_aborted_transaction_in_read_committed_fetches(broker):
    create(broker, "ab")
    install_verifier(broker)
    with RawClient(broker.bootstrap_servers) as raw:
        p1, p2 = init_producer_id(raw), init_producer_id(raw)
        assert produce(raw, "ab", txn_batch([b"x0", b"x1"], p1, 0)).base_offset == 0
        assert produce(raw, "ab", txn_batch([b"y0", b"y1"], p2, 0)).base_offset == 2
        assert write_markers(broker, p1, 0, False, [("ab", 0)]) == {("ab", 0): ErrorCode.none}  # marker at 4
        part = broker.server.state.topics["ab"].partitions[0]
        # LSO recorded with the entry: p2's transaction is still open at 2 (ProducerStateManager.lastStableOffset)
        assert [tuple(t) for t in broker.call(part.aborted_transactions, 0, 10)] == [(p1, 0, 4, 2)]

        first = fetch(raw, "ab", 0, READ_COMMITTED)
        assert first.last_stable_offset == 2 and offsets_of(first.records) == [0]
        assert [(a.producer_id, a.first_offset) for a in first.aborted_transactions] == [(p1, 0)]
        uncommitted = fetch(raw, "ab", 0, READ_UNCOMMITTED)
        assert uncommitted.aborted_transactions is None and offsets_of(uncommitted.records) == [0, 2, 4]

        assert write_markers(broker, p2, 0, True, [("ab", 0)]) == {("ab", 0): ErrorCode.none}  # marker at 5
        whole = fetch(raw, "ab", 0, READ_COMMITTED)
        assert whole.last_stable_offset == 6 and offsets_of(whole.records) == [0, 2, 4, 5]
        assert [(a.producer_id, a.first_offset) for a in whole.aborted_transactions] == [(p1, 0)]
        # the aborted transaction ends at its marker (4): a fetch from 5 overlaps nothing
        tail = fetch(raw, "ab", 5, READ_COMMITTED)
        assert offsets_of(tail.records) == [5] and list(tail.aborted_transactions) == []
        p3 = init_producer_id(raw)
        assert produce(raw, "ab", txn_batch([b"z0"], p3, 0)).base_offset == 6
        assert write_markers(broker, p3, 0, False, [("ab", 0)]) == {("ab", 0): ErrorCode.none}  # marker at 7
        both = fetch(raw, "ab", 5, READ_COMMITTED)
        assert offsets_of(both.records) == [5, 6, 7]
        assert [(a.producer_id, a.first_offset) for a in both.aborted_transactions] == [(p3, 6)]
        # only the batch at 5 fits: p3's transaction begins after the data, so it is not listed
        # (LocalLog.collectAbortedTransactions' upper bound is the offset after the fetched batches)
        one = fetch(raw, "ab", 5, READ_COMMITTED, partition_max_bytes=1)
        assert offsets_of(one.records) == [5] and list(one.aborted_transactions) == []


def test_a_parked_read_committed_fetch_is_completed_by_the_marker(broker):
    create(broker, "wake")
    install_verifier(broker)
    with RawClient(broker.bootstrap_servers, timeout_s=30) as raw, \
            RawClient(broker.bootstrap_servers, timeout_s=30) as waiter:
        pid = init_producer_id(raw)
        assert produce(raw, "wake", txn_batch([b"w0"], pid, 0)).error_code == 0
        result = {}
        t = threading.Thread(target=lambda: result.update(
            part=fetch(waiter, "wake", 0, READ_COMMITTED, max_wait_ms=20000)))
        t.start()
        wait_until(lambda: broker.server.purgatory.parked == 1, message="read_committed fetch parked")
        assert write_markers(broker, pid, 0, True, [("wake", 0)]) == {("wake", 0): ErrorCode.none}
        t.join(30)
    part = result["part"]
    assert part.last_stable_offset == 2 and offsets_of(part.records) == [0, 1]


def test_confluent_read_committed_consumer_sees_committed_records_only_in_order(broker):
    create(broker, "cc")
    install_verifier(broker)
    with RawClient(broker.bootstrap_servers) as raw:
        p1, p2 = init_producer_id(raw), init_producer_id(raw)
        assert produce(raw, "cc", txn_batch([b"a0"], p1, 0)).base_offset == 0
        assert produce(raw, "cc", txn_batch([b"b0"], p2, 0)).base_offset == 1
        assert produce(raw, "cc", txn_batch([b"a1"], p1, 1)).base_offset == 2
        assert produce(raw, "cc", txn_batch([b"b1", b"b2"], p2, 1)).base_offset == 3
        assert write_markers(broker, p1, 0, True, [("cc", 0)])[("cc", 0)] == ErrorCode.none  # 5
        assert write_markers(broker, p2, 0, False, [("cc", 0)])[("cc", 0)] == ErrorCode.none  # 6
        assert produce(raw, "cc", build_batch([(None, b"c0")], base_timestamp=1000),
                       transactional_id=None).base_offset == 7

    def consume(isolation: str) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"g-{isolation}",
                             "enable.auto.commit": False, "isolation.level": isolation})
        tp = TopicPartition("cc", 0, 0)
        consumer.assign([tp])
        seen = []
        try:
            def caught_up():
                msg = consumer.poll(0.2)
                if msg is not None:
                    assert msg.error() is None, msg.error()
                    seen.append(msg.value())
                return consumer.position([TopicPartition("cc", 0)])[0].offset >= 8

            wait_until(caught_up, timeout_s=20, message=f"{isolation} consumer reaches the end")
        finally:
            consumer.close()
        return seen

    assert consume("read_committed") == [b"a0", b"a1", b"c0"]
    assert consume("read_uncommitted") == [b"a0", b"b0", b"a1", b"b1", b"b2", b"c0"]

    def kafka_python(isolation: str) -> list[bytes]:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTopicPartition

        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=None, enable_auto_commit=False,
                                 isolation_level=isolation, fetch_max_wait_ms=100, request_timeout_ms=20_000)
        tp = KTopicPartition("cc", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        seen = []
        try:
            def caught_up():
                for msgs in consumer.poll(timeout_ms=200).values():
                    seen.extend(m.value for m in msgs)
                return consumer.position(tp) >= 8

            wait_until(caught_up, timeout_s=20, message=f"kafka-python {isolation} consumer reaches the end")
        finally:
            consumer.close()
        return seen

    assert kafka_python("read_committed") == [b"a0", b"a1", b"c0"]
    assert kafka_python("read_uncommitted") == [b"a0", b"b0", b"a1", b"b1", b"b2", b"c0"]


def test_produce_refuses_client_control_batches_and_transactions_without_a_coordinator(broker):
    create(broker, "refuse")
    with RawClient(broker.bootstrap_servers) as raw:
        pid = init_producer_id(raw)
        # no coordinator (server.transactions is None): a transactional producer is refused, as before
        no_coordinator = produce(raw, "refuse", txn_batch([b"v"], pid, 0))
        assert no_coordinator.error_code == ErrorCode.transactional_id_authorization_failed
        install_verifier(broker)
        control = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], producer_id=pid,
                              producer_epoch=0, attributes=0x30)
        refused = produce(raw, "refuse", control)  # LogValidator: clients may not write control records
        assert refused.error_code == ErrorCode.invalid_record
        no_id = produce(raw, "refuse", txn_batch([b"v"], pid, 0), transactional_id=None)
        assert no_id.error_code == ErrorCode.transactional_id_authorization_failed
        assert produce(raw, "refuse", txn_batch([b"v"], pid, 0)).error_code == 0
        # a plain batch of a producer whose transaction is open: INVALID_TXN_STATE
        plain = produce(raw, "refuse", txn_batch([b"p"], pid, 1, transactional=False), transactional_id=None)
        assert plain.error_code == ErrorCode.invalid_txn_state
    assert broker.server.state.topics["refuse"].partitions[0].log.log_end_offset == 1


def test_verification_refusal_refuses_the_partition(broker):
    create(broker, "verify")

    class Refusing:
        async def verify_produce(self, transactional_id, producer_id, producer_epoch, topic_partitions):
            return {tp: ErrorCode.invalid_txn_state for tp in topic_partitions}

    install_verifier(broker, Refusing())
    with RawClient(broker.bootstrap_servers) as raw:
        pid = init_producer_id(raw)
        assert produce(raw, "verify", txn_batch([b"v"], pid, 0)).error_code == ErrorCode.invalid_txn_state
    assert broker.server.state.topics["verify"].partitions[0].log.log_end_offset == 0


def test_write_txn_markers_answers_per_partition(broker):
    create(broker, "m", partitions=2)
    install_verifier(broker)
    with RawClient(broker.bootstrap_servers) as raw:
        pid = init_producer_id(raw)
        assert produce(raw, "m", txn_batch([b"v"], pid, 0)).error_code == 0
    # a deleted topic or partition counts as written (KafkaApis.handleWriteTxnMarkersRequest)
    assert write_markers(broker, pid, 0, True, [("m", 0), ("m", 1), ("gone", 0), ("m", 7)]) == {
        ("m", 0): ErrorCode.none, ("m", 1): ErrorCode.none, ("gone", 0): ErrorCode.none, ("m", 7): ErrorCode.none}
    # a bumped epoch's marker moves the producer on; the old epoch's is then refused
    assert write_markers(broker, pid, 1, False, [("m", 0)]) == {("m", 0): ErrorCode.none}
    assert write_markers(broker, pid, 0, False, [("m", 0)]) == {("m", 0): ErrorCode.invalid_producer_epoch}
    assert write_markers(broker, pid, 1, False, [("m", 0)], coordinator_epoch=-1) == {
        ("m", 0): ErrorCode.transaction_coordinator_fenced}
    part = broker.server.state.topics["m"].partitions[0]
    assert broker.call(lambda: (part.log.log_end_offset, part.last_stable_offset)) == (3, 3)
    data = broker.call(part.log.read, 1, 1 << 20)
    assert [(r.key, r.value) for r in iter_records(data)] == [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")]


def test_the_lso_never_falls_below_the_log_start_offset(broker):
    create(broker, "del")
    install_verifier(broker)
    with RawClient(broker.bootstrap_servers) as raw:
        pid = init_producer_id(raw)
        assert produce(raw, "del", txn_batch([b"o0", b"o1"], pid, 0)).error_code == 0
        assert produce(raw, "del", build_batch([(None, b"p")]), transactional_id=None).base_offset == 2
        assert fetch(raw, "del", 0, READ_COMMITTED).last_stable_offset == 0
        part = broker.server.state.topics["del"].partitions[0]
        broker.call(part.log.delete_records_before, 1)  # DeleteRecords into the open transaction
        after = fetch(raw, "del", 1, READ_COMMITTED)
        # UnifiedLog.updateFirstUnstableOffset: max(first unstable offset, log start offset)
        assert after.last_stable_offset == 1 and not after.records
        assert list_offset(raw, "del", LATEST, READ_COMMITTED) == 1


def test_describe_producers_shows_the_open_transactions_start_offset(broker):
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

    create(broker, "dp")
    install_verifier(broker)
    with RawClient(broker.bootstrap_servers) as raw:
        p1, p2 = init_producer_id(raw), init_producer_id(raw)
        assert produce(raw, "dp", build_batch([(None, b"i")], producer_id=p1, producer_epoch=0, base_sequence=0),
                       transactional_id=None).base_offset == 0
        assert produce(raw, "dp", txn_batch([b"t0", b"t1"], p2, 0, timestamp_ms=1234)).base_offset == 1
        assert write_markers(broker, p2, 0, True, [("dp", 0)], coordinator_epoch=3)[("dp", 0)] == ErrorCode.none
        assert produce(raw, "dp", txn_batch([b"t2"], p2, 2, timestamp_ms=1235)).base_offset == 4

        def describe(partitions):
            resp = raw.request(DescribeProducersRequest(topics=(TopicRequest(name="dp", partition_indexes=partitions),)))
            return resp.topics[0].partitions

        [part, missing] = describe((0, 5))
    # ReplicaManager.activeProducerState: (id, epoch, last sequence, last timestamp, coordinator epoch, txn start)
    assert part.error_code == 0 and [
        (p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
         p.current_txn_start_offset) for p in part.active_producers] == sorted([
            (p1, 0, 0, 0, -1, -1), (p2, 0, 2, 1235, 3, 4)])
    assert missing.error_code == ErrorCode.unknown_topic_or_partition and missing.active_producers == ()
