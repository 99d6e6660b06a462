"""Quotas and connection limits over loopback TCP with real clients (issue 29, acceptance 4).

Kafka: ClientQuotaManager (recordAndGetThrottleTimeMs, throttle by muting the channel),
KafkaApis.handleProduceRequest / handleShareFetchRequest, SocketServer.ConnectionQuotas."""

from __future__ import annotations

import json
import socket
import struct
import time

import confluent_kafka
import pytest

from quafka.client import Admin

QUOTA = 1048576


def _api_versions_frame(correlation_id: int = 1) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def _answers(sock: socket.socket) -> bool:
    """True when the broker answers an ApiVersions request; False when it closed the connection."""
    try:
        sock.sendall(_api_versions_frame())
        head = sock.recv(4)
    except (ConnectionResetError, BrokenPipeError):
        return False
    return len(head) == 4


def test_alter_and_describe_client_quotas_survive_a_restart(make_broker, tmp_path):
    broker = make_broker(data_dir=str(tmp_path))
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        alice = (("user", "alice"),)
        app = (("client-id", "app"),)
        default_client = (("client-id", None),)
        results = admin.alter_client_quotas({
            alice: {"producer_byte_rate": 1024, "request_percentage": 50.0},
            app: {"consumer_byte_rate": 2048},
            default_client: {"producer_byte_rate": 0},  # refused: must be > 0
            (("ip", "1.2.3.4"),): {"producer_byte_rate": 5},  # quafka has no ip entities
            (("user", "bob"),): {"bogus_rate": 1},
        })
        assert results[alice] is None and results[app] is None
        assert "must be greater than 0" in str(results[default_client])
        assert "ip" in str(results[(("ip", "1.2.3.4"),)])
        assert "Invalid configuration key bogus_rate" in str(results[(("user", "bob"),)])
        admin.alter_client_quotas({alice: {"request_percentage": None}})
    broker.stop()
    broker = make_broker(data_dir=str(tmp_path))
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        assert admin.describe_client_quotas() == {
            alice: {"producer_byte_rate": 1024.0}, app: {"consumer_byte_rate": 2048.0}}
        assert admin.describe_client_quotas([("user", ...)], strict=True) == {alice: {"producer_byte_rate": 1024.0}}
        assert admin.describe_client_quotas([("client-id", "app")]) == {app: {"consumer_byte_rate": 2048.0}}
        assert admin.describe_client_quotas([("client-id", None)]) == {}


def _produce_for(bootstrap: str, client_id: str, seconds: float, stats: list) -> list[tuple[float, int]]:
    """Produce 16 KiB records as fast as the broker takes them; (time acked, bytes) per delivery."""
    acked: list[tuple[float, int]] = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 262144,
        "queue.buffering.max.kbytes": 8192, "statistics.interval.ms": 1000,
        "stats_cb": lambda raw: stats.append(json.loads(raw)),
    })
    payload = b"x" * 16384

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce("quota-topic", payload, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    return acked


def test_a_producer_is_held_to_its_byte_rate_while_another_client_keeps_its_rate(make_broker):
    """Acceptance 4: producer_byte_rate 1 MiB/s, measured over 20 s after a 4 s start, within 10 %;
    the throttle time reaches the client (librdkafka's stats `throttle`); a client id with no
    quota on the same broker produces far above it. With quafka.quota.burst.windows=1: under
    Kafka's own arithmetic (the default) a greedy producer's ten-second burst returns every ~11 s
    and its rate over 20 s swings 0.6-1.4x (test_client_quotas.py shows the arithmetic)."""
    broker = make_broker(config={"quafka.quota.burst.windows": 1})
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics({"quota-topic": (1, 1)})
        admin.alter_client_quotas({(("client-id", "throttled"),): {"producer_byte_rate": QUOTA}})
    stats: list = []
    acked = _produce_for(broker.bootstrap_servers, "throttled", 25.0, stats)
    start = acked[0][0] + 4.0
    window = [n for t, n in acked if start <= t < start + 20.0]
    rate = sum(window) / 20.0
    print(f"throttled producer: {rate / QUOTA:.3f} x quota over 20 s")
    assert rate == pytest.approx(QUOTA, rel=0.10)
    throttles = [b.get("throttle", {}).get("max", 0) for s in stats for b in s.get("brokers", {}).values()]
    assert max(throttles) > 0
    free = _produce_for(broker.bootstrap_servers, "free", 3.0, [])
    assert sum(n for _, n in free) / 3.0 > 3 * QUOTA


def test_connections_past_max_connections_per_ip_are_refused_and_other_addresses_are_not(make_broker):
    broker = make_broker(config={"max.connections.per.ip": 2, "max.connections.per.ip.overrides": "127.0.0.3:0"})
    first, second = _connect(broker.port), _connect(broker.port)
    assert _answers(first) and _answers(second)
    third = _connect(broker.port)
    assert not _answers(third)
    other = _connect(broker.port, source="127.0.0.2")
    assert _answers(other)
    assert not _answers(_connect(broker.port, source="127.0.0.3"))  # its override is 0
    first.close()

    def reopened() -> bool:
        return _answers(_connect(broker.port))
    deadline = time.monotonic() + 10
    while not reopened():  # the broker sees the close asynchronously
        assert time.monotonic() < deadline
    for s in (second, third, other):
        s.close()


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(make_broker):
    broker = make_broker(config={"connections.max.idle.ms": 300})
    sock = _connect(broker.port)
    assert _answers(sock)
    sock.recv(65536)
    sock.settimeout(10)
    assert sock.recv(1) == b""  # closed by the broker, within the 10 s timeout


def test_consumer_byte_rate_throttles_share_fetch_and_every_record_is_delivered_once(make_broker):
    """ShareFetch response bytes count against consumer_byte_rate (KafkaApis.handleShareFetchRequest):
    the throttle reaches the client's responses (counted per client id by the broker), and — quafka's
    deviation — a throttled response still carries the records it acquired, so none comes back with
    a second delivery attempt."""
    from confluent_kafka import ShareConsumer
    from support import set_group_configs, wait_until

    broker = make_broker()
    bootstrap = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({"share-quota": (1, 1)})
        admin.alter_client_quotas({(("client-id", "share-slow"),): {"consumer_byte_rate": 100000}})
    set_group_configs(bootstrap, "sq", {"share.auto.offset.reset": "earliest"})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.size": 40000})
    for i in range(40):
        producer.produce("share-quota", b"%04d" % i + b"y" * 32764, partition=0)
    assert producer.flush(10) == 0
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "sq", "client.id": "share-slow",
                              "log_level": 3})
    consumer.subscribe(["share-quota"])
    seen: dict[int, int] = {}
    try:
        def all_seen() -> bool:
            for msg in consumer.poll(0.5):
                if msg.error() is None:
                    seen[msg.offset()] = msg.delivery_count()
            return len(seen) == 40
        wait_until(all_seen, timeout_s=60)
    finally:
        consumer.close()
    assert sorted(seen) == list(range(40))
    assert set(seen.values()) == {1}
    throttles = broker.server.quotas.throttles
    assert throttles[("consumer_byte_rate", "ANONYMOUS", "share-slow")][0] > 0
