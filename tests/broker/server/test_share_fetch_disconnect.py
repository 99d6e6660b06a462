"""A share consumer that goes away while its ShareFetch is parked (issue 28, fix 1).

Kafka's SocketServer tells its `ConnectionDisconnectListener`s the moment a connection closes, and
`ShareSessionCache.ClientConnectionDisconnectListener` removes the connection's session and
releases what its member holds. quafka does the same even while a request of that connection is
in flight: the parked fetch answers empty at once and acquires nothing for the client that has
gone. Before this, a parked fetch kept its share session alive until MaxWaitMs and acquired new
records for a client that could not receive them; each consumer restart pushed records nobody saw
one delivery closer to the limit.

Beyond Kafka: records a parked fetch acquired but never sent (its connection dropped between the
acquisition and the response) are made available with the count from before
(`SharePartition.return_unsent`); Kafka loses that response on the closed channel and keeps the
count (`DeliveryCountOps.NO_OP`).

Also here: a ShareAcknowledge for several partitions applies them concurrently (Kafka's
`SharePartitionManager.acknowledge` starts every partition's acknowledgement and waits for all):
with flush on, their state writes share one fsync.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from quafka.broker.server.embedded import EmbeddedBroker
from quafka.protocol.record_batch import build_batch
from support import RawClient, wait_until
from support.share_client import ACCEPT, ShareClient, create_topic, produce, records_in, topic_id_of

PARK_MS = 20_000  # far longer than any deadline below: a fetch that answers in time was woken


def _parked(broker) -> int:
    return broker.call(lambda: broker.server.share_partitions.purgatory.operation_count())


def _sessions(broker) -> int:
    return broker.call(lambda: len(broker.server.share_sessions))


def _park(member: ShareClient) -> None:
    """Open the member's share session, then send a long-polling ShareFetch and do not wait."""
    assert member.fetch(max_wait_ms=0).error_code == ErrorCode.none  # epoch 0: nothing to acquire yet
    member.raw.send_frame(member.raw_frame(member.fetch_request(max_wait_ms=PARK_MS)))


def _joined(bootstrap: str, group: str, topic: str) -> ShareClient:
    member = ShareClient(bootstrap, group)
    member.join([topic])
    member.wait_for_assignment()
    return member


def _fetch_all(member: ShareClient, expected: int) -> list:
    got: list = []

    def more():
        resp = member.fetch(max_wait_ms=200)
        assert resp.error_code == ErrorCode.none
        for records in records_in(resp).values():
            got.extend(records)
        return len(got) >= expected

    wait_until(more, 10, message=f"{expected} records")
    return got


def test_consumers_gone_while_parked_are_never_charged_a_delivery():
    """Three consumers park a ShareFetch each and drop their connections (a consumer restarting
    three times); then records are produced. The broker notices each drop at once (the parked
    fetches answer, the sessions go), so a fourth consumer receives every record at its first
    delivery. Before the fix a parked fetch held its session for its MaxWaitMs and acquired the
    records for a client that had gone: they came back one delivery closer to the limit."""
    with EmbeddedBroker(config={"group.share.delivery.count.limit": 2}) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "jobs", 1)
        for attempt in range(3):
            member = _joined(bootstrap, "g", "jobs")
            _park(member)
            wait_until(lambda: _parked(broker) == 1, 10, message="the fetch to park")
            member.disconnect()
            wait_until(lambda: _sessions(broker) == 0 and _parked(broker) == 0, 5,
                       message=f"the broker to notice disconnect #{attempt + 1} while the fetch is parked")
        produce(bootstrap, "jobs", [b"job-0", b"job-1", b"job-2"])
        survivor = _joined(bootstrap, "g", "jobs")
        records = _fetch_all(survivor, 3)
        assert sorted((r.value, r.delivery_count) for r in records) == [
            (b"job-0", 1), (b"job-1", 1), (b"job-2", 1)]
        survivor.close()


def test_records_acquired_for_a_fetch_whose_connection_drops_before_its_answer_go_back_undelivered():
    """The window Kafka charges: a parked fetch acquires (a produce woke it) and its connection
    closes before the response is written. The broker's loop is held while the produce and the
    close arrive, so both are read in one loop turn: the fetch acquires, then the close is seen
    before the fetch's answer is written. The record goes back with its count from before (0),
    so the next consumer receives it at delivery 1 (Kafka: 2)."""
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "jobs", 1)
        topic_id = topic_id_of(bootstrap, "jobs")
        member = _joined(bootstrap, "g", "jobs")
        _park(member)
        wait_until(lambda: _parked(broker) == 1, 10, message="the fetch to park")
        with RawClient(bootstrap) as producer:
            request = producer.encode(ProduceRequest(
                transactional_id=None, acks=1, timeout=timedelta(seconds=10), topic_data=(TopicProduceData(
                    name="jobs", partition_data=(PartitionProduceData(
                        index=0, records=build_batch([(None, b"job")], base_timestamp=1)),)),)))
            holding, release = threading.Event(), threading.Event()

            def hold_the_loop():
                holding.set()
                release.wait(10)

            blocker = threading.Thread(target=broker.call, args=(hold_the_loop,))
            blocker.start()
            assert holding.wait(10)
            producer.send_frame(request)  # first: it wakes the parked fetch, which acquires the record
            member.disconnect()  # then the close, read in the same loop turn
            release.set()
            blocker.join(10)
            assert producer.recv_frame()  # the produce was answered
        wait_until(lambda: _sessions(broker) == 0 and _parked(broker) == 0, 5, message="the drop to be handled")
        in_flight = broker.call(lambda: broker.server.share_partitions.contexts[("g", topic_id, 0)]
                                .share_partition.record(0))
        assert in_flight is not None and (in_flight[0].name, in_flight[1]) == ("AVAILABLE", 0), in_flight
        survivor = _joined(bootstrap, "g", "jobs")
        [record] = _fetch_all(survivor, 1)
        assert (record.value, record.delivery_count) == (b"job", 1)
        returned = broker.call(lambda: broker.server.metrics.share_fetch_unsent_returned)
        assert returned == 1
        survivor.close()


def test_a_fetch_whose_session_ended_while_its_acknowledgements_were_written_acquires_nothing(monkeypatch):
    """A ShareFetch carrying acknowledgements waits for their state write (flush on); its
    connection drops meanwhile. When the write completes the fetch must not acquire the next
    records for the gone member (they stay AVAILABLE, delivery count 0)."""
    with EmbeddedBroker(config={"log.flush.interval.messages": 1}) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "jobs", 1)
        topic_id = topic_id_of(bootstrap, "jobs")
        member = _joined(bootstrap, "g", "jobs")
        assert member.fetch(max_wait_ms=0).error_code == ErrorCode.none  # share.auto.offset.reset=latest: start here
        produce(bootstrap, "jobs", [b"first"])
        [first] = _fetch_all(member, 1)
        produce(bootstrap, "jobs", [b"second"])
        real = os.fdatasync
        in_sync, go_on = threading.Event(), threading.Event()

        def slow_fdatasync(fd):  # holds the state write's fsync until the client has gone
            in_sync.set()
            go_on.wait(10)
            real(fd)

        monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
        member.raw.send_frame(member.raw_frame(member.fetch_request(
            max_wait_ms=0, acks={(topic_id, 0): [(first.offset, first.offset, ACCEPT)]})))
        assert in_sync.wait(10)
        member.disconnect()
        wait_until(lambda: _sessions(broker) == 0, 5, message="the drop to be noticed during the write")
        go_on.set()
        monkeypatch.setattr(os, "fdatasync", real)

        def settled():
            sp = broker.server.share_partitions.contexts[("g", topic_id, 0)].share_partition
            return sp.pending_writes() == 0 and sp.start_offset == first.offset + 1  # "first" accepted

        wait_until(lambda: broker.call(settled), 10, message="the acknowledgement to be written")
        survivor = _joined(bootstrap, "g", "jobs")
        [second] = _fetch_all(survivor, 1)
        assert (second.value, second.delivery_count) == (b"second", 1)  # not acquired for the gone member
        survivor.close()


def test_acknowledgements_for_several_partitions_share_one_fsync(monkeypatch):
    """One ShareAcknowledge for four partitions, flush on, one state partition: their state writes
    are applied concurrently and fsynced in one round (they were applied one after another, four
    fsync rounds). Kafka's SharePartitionManager.acknowledge starts them all and waits for all."""
    config = {"log.flush.interval.messages": 1, "share.coordinator.state.topic.num.partitions": 1}
    with EmbeddedBroker(config=config) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "jobs", 4)
        member = _joined(bootstrap, "g", "jobs")
        assert member.fetch(max_wait_ms=0).error_code == ErrorCode.none  # share.auto.offset.reset=latest: start here
        for p in range(4):
            produce(bootstrap, "jobs", [f"job-{p}".encode()], partition=p)
        topic_id = topic_id_of(bootstrap, "jobs")
        records: dict = {}

        def fetched_all():
            resp = member.fetch(max_wait_ms=200)
            for tp, got in records_in(resp).items():
                records.setdefault(tp, []).extend(got)
            return len(records) == 4

        wait_until(fetched_all, 10, message="a record from each partition")
        syncs: list[int] = []
        real = os.fdatasync

        def counting_fdatasync(fd):
            syncs.append(fd)
            real(fd)

        monkeypatch.setattr(os, "fdatasync", counting_fdatasync)
        resp = member.acknowledge({tp: [(got[0].offset, got[0].offset, ACCEPT)] for tp, got in records.items()})
        monkeypatch.setattr(os, "fdatasync", real)
        assert resp.error_code == ErrorCode.none
        assert {(t.topic_id, p.partition_index): p.error_code for t in resp.responses for p in t.partitions} == {
            (topic_id, p): ErrorCode.none for p in range(4)}
        assert len(syncs) == 1, syncs
        member.close()
