"""Produce and Fetch behaviours at their edges, with raw kio requests."""

from __future__ import annotations

import importlib
import threading
import uuid
from datetime import timedelta

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition as FetchPartition12
from kio.schema.fetch.v12.request import FetchRequest as FetchRequest12
from kio.schema.fetch.v12.request import FetchTopic as FetchTopic12
from kio.schema.fetch.v16.request import FetchPartition as FetchPartition16
from kio.schema.fetch.v16.request import FetchRequest as FetchRequest16
from kio.schema.fetch.v16.request import FetchTopic as FetchTopic16
from kio.schema.fetch.v16.request import ReplicaState
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from support import RawClient, wait_until

from quafka.protocol.record_batch import TIMESTAMP_TYPE_MASK, batch_crc_ok, build_batch, iter_headers


def create(broker, name, partitions=1, config=None):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(10)


def produce_req(topic, records: bytes, acks=-1, partition=0):
    return ProduceRequest(transactional_id=None, acks=acks, timeout=timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),))


def fetch12(topic, offset, *, max_wait_ms=0, min_bytes=1, partition_max_bytes=1 << 20, max_bytes=50 << 20,
            session_id=0, session_epoch=-1):
    return FetchRequest12(
        cluster_id=None, replica_id=-1, max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        max_bytes=max_bytes, isolation_level=0, session_id=session_id, session_epoch=session_epoch,
        topics=(FetchTopic12(topic=topic, partitions=(FetchPartition12(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=partition_max_bytes),)),),
        forgotten_topics_data=(), rack_id="")


def batch(n, start=0, size=10):
    return build_batch([(None, b"%0*d" % (size, start + i)) for i in range(n)], base_timestamp=1000)


def test_long_poll_is_completed_by_an_append(broker):
    create(broker, "lp")
    with RawClient(broker.bootstrap_servers, timeout_s=30) as waiter, RawClient(broker.bootstrap_servers) as writer:
        result = {}
        t = threading.Thread(target=lambda: result.update(resp=waiter.request(fetch12("lp", 0, max_wait_ms=20000))))
        t.start()
        # the fetch is parked until data arrives; produce once the broker has it waiting
        wait_until(lambda: broker.server.purgatory.parked == 1, message="fetch parked")
        assert writer.request(produce_req("lp", batch(3))).responses[0].partition_responses[0].error_code == 0
        t.join(30)
        part = result["resp"].responses[0].partitions[0]
        assert part.error_code == 0 and part.high_watermark == 3
        assert [h.last_offset for _, h in iter_headers(part.records)] == [2]


def test_long_poll_returns_empty_when_max_wait_passes(broker):
    create(broker, "lp2")
    with RawClient(broker.bootstrap_servers) as raw:
        part = raw.request(fetch12("lp2", 0, max_wait_ms=50)).responses[0].partitions[0]
    assert part.error_code == 0 and part.records in (b"", None) and part.high_watermark == 0


def test_fetch_beyond_the_end_is_out_of_range_and_at_the_end_is_empty(broker):
    create(broker, "oor")
    with RawClient(broker.bootstrap_servers) as raw:
        raw.request(produce_req("oor", batch(5)))
        at_end = raw.request(fetch12("oor", 5)).responses[0].partitions[0]
        beyond = raw.request(fetch12("oor", 6)).responses[0].partitions[0]
    assert at_end.error_code == 0 and not at_end.records
    assert beyond.error_code == 1 and beyond.high_watermark == 5 and beyond.log_start_offset == 0


def test_first_batch_is_returned_whole_even_above_partition_max_bytes(broker):
    create(broker, "big")
    with RawClient(broker.bootstrap_servers) as raw:
        raw.request(produce_req("big", batch(50, size=100)))
        raw.request(produce_req("big", batch(50, start=50, size=100)))
        part = raw.request(fetch12("big", 10, partition_max_bytes=100)).responses[0].partitions[0]
        headers = [h for _, h in iter_headers(part.records)]
        assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 49)]
        both = raw.request(fetch12("big", 10)).responses[0].partitions[0]
        assert [(h.base_offset, h.last_offset) for _, h in iter_headers(both.records)] == [(0, 49), (50, 99)]


def test_incremental_fetch_session_is_declined(broker):
    create(broker, "sess")
    with RawClient(broker.bootstrap_servers) as raw:
        full = raw.request(fetch12("sess", 0, session_epoch=0))
        assert full.error_code == 0 and full.session_id == 0
        incremental = raw.request(fetch12("sess", 0, session_id=1234, session_epoch=1))
        assert incremental.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND


def test_fetch_by_unknown_topic_id_gets_unknown_topic_id(broker):
    create(broker, "ids")
    req = FetchRequest16(
        cluster_id=None, replica_state=ReplicaState(replica_id=-1, replica_epoch=-1), max_wait=timedelta(0),
        min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(FetchTopic16(topic_id=uuid.uuid4(), partitions=(FetchPartition16(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    with RawClient(broker.bootstrap_servers) as raw:
        assert raw.request(req).responses[0].partitions[0].error_code == 100  # UNKNOWN_TOPIC_ID


def test_produce_errors_unknown_topic_and_bad_acks(broker):
    create(broker, "p")
    with RawClient(broker.bootstrap_servers) as raw:
        unknown = raw.request(produce_req("nope", batch(1))).responses[0].partition_responses[0]
        assert unknown.error_code == 3
        bad_partition = raw.request(produce_req("p", batch(1), partition=7)).responses[0].partition_responses[0]
        assert bad_partition.error_code == 3
        bad_acks = raw.request(produce_req("p", batch(1), acks=2)).responses[0].partition_responses[0]
        assert bad_acks.error_code == 21  # INVALID_REQUIRED_ACKS
        ok = raw.request(produce_req("p", batch(2))).responses[0].partition_responses[0]
        assert (ok.error_code, ok.base_offset) == (0, 0)


def test_acks_zero_gets_no_response_but_is_written(broker):
    create(broker, "fire")
    with RawClient(broker.bootstrap_servers) as raw:
        raw.send_frame(raw.encode(produce_req("fire", batch(4), acks=0)))
        # the next response on this connection belongs to the next request
        part = raw.request(fetch12("fire", 0)).responses[0].partitions[0]
        assert part.high_watermark == 4


def test_log_append_time_topic_stamps_the_batch(broker):
    create(broker, "lat", config={"message.timestamp.type": "LogAppendTime"})
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(produce_req("lat", batch(3))).responses[0].partition_responses[0]
        assert resp.error_code == 0 and resp.log_append_time is not None
        part = raw.request(fetch12("lat", 0)).responses[0].partitions[0]
    (_, h), = list(iter_headers(part.records))
    assert h.attributes & TIMESTAMP_TYPE_MASK
    assert h.max_timestamp == int(resp.log_append_time.timestamp() * 1000)
    assert batch_crc_ok(part.records, 0, h)


def produce_v(version: int, topic: str, records: bytes, acks=-1):
    mod = importlib.import_module(f"kio.schema.produce.v{version}.request")
    return mod.ProduceRequest(transactional_id=None, acks=acks, timeout=timedelta(seconds=10), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=records),)),))


def test_kafka_produce_rules_one_batch_per_partition_and_codecs_by_version(broker):
    create(broker, "rules")
    with RawClient(broker.bootstrap_servers) as raw:
        two = raw.request(produce_req("rules", batch(1) + batch(1))).responses[0].partition_responses[0]
        assert two.error_code == 87  # INVALID_RECORD: exactly one batch per partition
        empty = raw.request(produce_req("rules", b"")).responses[0].partition_responses[0]
        assert empty.error_code == 87
        zstd = build_batch([(None, b"x")], attributes=4)
        old = raw.request(produce_v(6, "rules", zstd)).responses[0].partition_responses[0]
        assert old.error_code == 76  # UNSUPPORTED_COMPRESSION_TYPE below Produce v7
        new = raw.request(produce_v(7, "rules", zstd)).responses[0].partition_responses[0]
        assert new.error_code == 0 and new.base_offset == 0  # stored opaque, never decompressed


def test_acks_zero_produce_that_fails_closes_the_connection(broker):
    create(broker, "fire2")
    with RawClient(broker.bootstrap_servers) as raw:
        raw.send_frame(raw.encode(produce_req("no-such-topic", batch(1), acks=0)))
        try:
            raw.recv_frame()
            raise AssertionError("the broker must close the connection after a failed acks=0 produce")
        except (ConnectionError, OSError):
            pass
