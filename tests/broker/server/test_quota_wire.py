"""Client quotas and connection limits as a client sees them on the wire (raw kio requests over
loopback TCP): THROTTLING_QUOTA_EXCEEDED from CreateTopics, the muted connection of a client over
its request_percentage, a throttled Fetch answered empty, and max.connections per broker and per
listener. Kafka: ControllerMutationQuotaManager (Strict/PermissiveControllerMutationQuota),
ClientRequestQuotaManager, KafkaApis.handleFetchRequest (unrecordQuotaSensor),
SocketServer.ConnectionQuotas; the metrics each moves are read from the scrape."""

from __future__ import annotations

import datetime
import socket
import time
import urllib.request

import pytest
from kio.schema.create_topics.v5.request import CreatableTopic as CreatableTopicV5
from kio.schema.create_topics.v5.request import CreateTopicsRequest as CreateTopicsV5
from kio.schema.create_topics.v6.request import CreatableTopic, CreateTopicsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest
from prometheus_client.parser import text_string_to_metric_families

from quafka.client import Admin
from quafka.protocol.record_batch import iter_records
from support import RawClient, produce_batch

pytestmark = pytest.mark.timeout(60)

THROTTLING_QUOTA_EXCEEDED = 89


def _metric(broker, name: str, **labels) -> float:
    """One series' value from the broker's Prometheus scrape (0 when it has no such sample)."""
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def _set_quota(broker, client_id: str, **quotas: float) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        results = admin.alter_client_quotas({(("client-id", client_id),): quotas})
    assert set(results.values()) == {None}


def _create_v6(raw: RawClient, *topics: tuple[str, int]):
    return raw.request(CreateTopicsRequest(topics=tuple(
        CreatableTopic(name=n, num_partitions=p, replication_factor=1, assignments=(), configs=())
        for n, p in topics), timeout=datetime.timedelta(seconds=10), validate_only=False))


def test_create_topics_past_controller_mutation_rate_is_refused_strictly_from_v6_and_throttled_before(make_broker):
    """The bucket holds quota x quota.window.num x quota.window.size.seconds = 11 partitions. A
    request may take the bucket below zero; once it is below, CreateTopics v6+ answers each topic
    THROTTLING_QUOTA_EXCEEDED with the time to wait (StrictControllerMutationQuota), and v5 creates
    the topic and throttles the response instead (PermissiveControllerMutationQuota). Each request
    goes on a fresh connection: the one answered with a throttle is muted for that long."""
    broker = make_broker(config={"metrics.listener": "http://127.0.0.1:0"})
    _set_quota(broker, "mutator", controller_mutation_rate=1)
    bootstrap = broker.bootstrap_servers
    with RawClient(bootstrap, client_id="mutator") as raw:
        first = _create_v6(raw, ("mutations-a", 12))  # 11 tokens: allowed, the bucket goes to -1
    assert [(t.name, t.error_code) for t in first.topics] == [("mutations-a", 0)]
    with RawClient(bootstrap, client_id="mutator") as raw:
        refused = _create_v6(raw, ("mutations-b", 1), ("mutations-c", 1))
    assert [(t.name, t.error_code) for t in refused.topics] == [
        ("mutations-b", THROTTLING_QUOTA_EXCEEDED), ("mutations-c", THROTTLING_QUOTA_EXCEEDED)]
    assert refused.topics[0].error_message == "The throttling quota has been exceeded."
    throttle_ms = refused.throttle_time.total_seconds() * 1000
    assert 0 < throttle_ms <= 2000  # one token short at 1 partition/s
    with RawClient(bootstrap, client_id="mutator") as raw:
        permissive = raw.request(CreateTopicsV5(topics=(CreatableTopicV5(
            name="mutations-d", num_partitions=1, replication_factor=1, assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=10), validate_only=False))
    assert [(t.name, t.error_code) for t in permissive.topics] == [("mutations-d", 0)]
    assert permissive.throttle_time.total_seconds() > 0
    with RawClient(bootstrap, client_id="other") as raw:  # another client id has no quota
        assert [t.error_code for t in _create_v6(raw, ("mutations-e", 30)).topics] == [0]
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        topics = set(admin.list_topics())
    assert {"mutations-a", "mutations-d", "mutations-e"} <= topics and not topics & {"mutations-b", "mutations-c"}
    # the refused request and the permissive one (quafka counts each refused topic of a request)
    assert _metric(broker, "quafka_client_quota_throttles_total", quota="controller_mutation_rate",
                   client_id="mutator") >= 2
    assert _metric(broker, "quafka_client_quota_throttle_time_ms_total", client_id="mutator") >= throttle_ms


def _metadata(raw: RawClient):
    return raw.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))


def test_a_client_over_its_request_percentage_is_throttled_and_its_connection_muted(make_broker):
    """request_percentage 0.001 % of a thread: a few Metadata requests exceed it. The answer that
    breaks it carries throttle_time_ms, and the broker reads nothing more from that connection
    for that long (ClientQuotaManager.throttle mutes the channel): a request sent at once is
    answered only after the throttle, while another client's connection is answered at once."""
    broker = make_broker()
    _set_quota(broker, "busy", request_percentage=0.001)
    with RawClient(broker.bootstrap_servers, client_id="busy") as busy, \
            RawClient(broker.bootstrap_servers, client_id="idle") as idle:
        deadline = time.monotonic() + 10
        while True:
            throttle_ms = _metadata(busy).throttle_time.total_seconds() * 1000
            answered = time.monotonic()
            if throttle_ms > 0:
                break
            assert answered < deadline, "request_percentage never throttled"
        assert throttle_ms <= 1000  # capped at one quota window (quota.window.size.seconds)
        started = time.monotonic()
        assert _metadata(idle).throttle_time.total_seconds() == 0  # other connections are served
        assert time.monotonic() - started < throttle_ms / 1000
        _metadata(busy)  # held in the muted connection until the throttle ends
        waited_ms = (time.monotonic() - answered) * 1000
    print(f"throttle {throttle_ms:.0f} ms, next answer after {waited_ms:.0f} ms")
    assert waited_ms >= throttle_ms - 20  # the mute starts when the response is written


def _fetch(raw: RawClient, topic: str, offset: int):
    return raw.request(FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=8 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=8 << 20),)),),
        forgotten_topics_data=(), rack_id=""))


def test_a_throttled_fetch_is_answered_empty_and_its_bytes_are_not_counted(make_broker):
    """consumer_byte_rate 40 kB/s with two 1-second quota samples: a fetch is capped to one
    window's worth (getMaxValueInQuotaWindow); the fetch that breaks the quota is answered with no
    records and the throttle time, and its bytes are taken back (unrecordQuotaSensor): the fetch
    sent right after it is held until the mute ends, then answered with the records. Were the
    throttled fetch's bytes counted, that one would be throttled too."""
    broker = make_broker(config={"quota.window.num": 2, "quota.window.size.seconds": 1})
    bootstrap = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({"fetch-quota": (1, 1)})
    for i in range(30):
        produce_batch(bootstrap, "fetch-quota", 1, tag=f"{i:03d}" + "x" * 4000)
    _set_quota(broker, "slow-reader", consumer_byte_rate=40000)
    with RawClient(bootstrap, client_id="slow-reader") as raw:
        first = _fetch(raw, "fetch-quota", 0)
        assert first.throttle_time.total_seconds() == 0
        records = list(iter_records(first.responses[0].partitions[0].records or b""))
        assert [r.offset for r in records] == list(range(len(records)))
        assert 0 < sum(len(r.value) for r in records) <= 40000 < 30 * 4000  # capped to one window's worth
        throttled = _fetch(raw, "fetch-quota", len(records))
        answered = time.monotonic()
        throttle_ms = throttled.throttle_time.total_seconds() * 1000
        assert throttle_ms > 0 and throttled.responses == ()  # empty: no records for a throttled fetch
        # the same offsets again: held by the mute, then served within the quota, as the
        # throttled fetch's bytes were taken back (counted, they would throttle this one too)
        again = _fetch(raw, "fetch-quota", len(records))
        waited_ms = (time.monotonic() - answered) * 1000
    print(f"throttle {throttle_ms:.0f} ms, next answer after {waited_ms:.0f} ms")
    assert waited_ms >= throttle_ms - 20
    assert again.throttle_time.total_seconds() == 0
    more = list(iter_records(again.responses[0].partitions[0].records or b""))
    assert more and more[0].offset == len(records)


def _answers(port: int) -> bool:
    """Open a connection and send ApiVersions: True when answered, False when the broker closed it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        body = b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04test"
        sock.sendall(len(body).to_bytes(4, "big") + body)
        return len(sock.recv(4)) == 4
    except (ConnectionResetError, BrokenPipeError):
        return False
    finally:
        _OPEN.append(sock)


_OPEN: list[socket.socket] = []


def test_max_connections_per_broker_and_per_listener_refuse_over_tcp_while_open_ones_keep_working(make_broker):
    """`listener.name.internal.max.connections=1` and `max.connections=3` on a broker with two
    listeners: a second connection to INTERNAL is closed at once while PLAINTEXT takes more; the
    fourth connection to the broker is closed whatever its listener; the connections already open
    keep being served (SocketServer.ConnectionQuotas: per listener, then broker-wide)."""
    broker = make_broker(config={
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "listener.name.internal.max.connections": 1, "max.connections": 3,
        "metrics.listener": "http://127.0.0.1:0"})
    plain_port, internal_port = (port for _, port in broker.server.bound)
    try:
        assert _answers(internal_port)
        assert not _answers(internal_port)  # the listener's limit
        assert _answers(plain_port) and _answers(plain_port)  # the other listener takes more
        assert not _answers(plain_port)  # the broker's limit: 3 open
        assert not _answers(internal_port)
        for sock in (_OPEN[0], _OPEN[2]):  # the first INTERNAL one and a PLAINTEXT one still answer
            sock.recv(65536)
            body = b"\x00\x12\x00\x00\x00\x00\x00\x02\x00\x04test"
            sock.sendall(len(body).to_bytes(4, "big") + body)
            assert len(sock.recv(4)) == 4
        assert _metric(broker, "quafka_connections_refused_total", reason="listener max.connections") == 1
        assert _metric(broker, "quafka_connections_refused_total", reason="max.connections") == 2
        assert _metric(broker, "quafka_connections_open") == 3
    finally:
        while _OPEN:
            _OPEN.pop().close()
