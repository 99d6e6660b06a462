"""Metadata, FindCoordinator and DescribeCluster advertise the endpoint of the listener the request
came in on (Kafka's MetadataCache.getAliveBrokerNodes(listenerName)), so a client bootstrapped on
one listener stays on it; with one listener nothing changes."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from quafka.broker.server.embedded import EmbeddedBroker


def _brokers(addr: str) -> list[str]:
    meta = AdminClient({"bootstrap.servers": addr}).list_topics(timeout=10)
    return [f"{b.host}:{b.port}" for b in meta.brokers.values()]


def test_each_listener_advertises_itself():
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"}
    with EmbeddedBroker(config=config) as broker:
        plain, internal = broker.listener_address("PLAINTEXT"), broker.listener_address("INTERNAL")
        assert plain != internal
        assert _brokers(plain) == [plain]
        assert _brokers(internal) == [internal]
        # DescribeCluster likewise
        admin = AdminClient({"bootstrap.servers": internal})
        cluster = admin.describe_cluster().result(timeout=10)
        assert [f"{n.host}:{n.port}" for n in cluster.nodes] == [internal]


def test_advertised_listeners_are_kept_per_listener():
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
              "advertised.listeners": "PLAINTEXT://localhost:0,INTERNAL://127.0.0.1:0"}
    with EmbeddedBroker(config=config) as broker:
        plain_port = broker.server.bound[0][1]
        assert broker.bootstrap_servers == f"localhost:{plain_port}"  # the first advertised listener, as before
        internal = broker.listener_address("INTERNAL")
        assert _brokers(internal) == [internal]
        assert _brokers(f"127.0.0.1:{plain_port}") == [f"localhost:{plain_port}"]
