"""What the client knows of the cluster: brokers, topics, partition leaders, coordinators.

``Cluster(bootstrap_servers)`` connects to the first reachable "host:port" of the list, reads
Metadata (v12+, so topics carry their topic ids) and keeps one BrokerConnection per node id,
opened on first use and reopened after it drops. Leaders are looked up per (topic, partition);
``refresh_metadata`` is called again when a request reports a stale leader. FindCoordinator
(key type 0, group) answers which node coordinates a group.
"""

from __future__ import annotations

import asyncio
import ssl

from quafka.protocol.errors import ErrorCode

from ._metadata import BrokerInfo, PartitionInfo, TopicInfo
from ._security import PLAINTEXT, SecuritySettings
from ._transport import BrokerConnection
from .errors import KafkaConnectionError, KafkaException, error_for_code

__all__ = ["BrokerInfo", "Cluster", "PartitionInfo", "TopicInfo", "parse_bootstrap_servers"]

METADATA_KEY = 3
FIND_COORDINATOR_KEY = 10
METADATA_MIN_VERSION = 12  # topic ids in requests and responses
COORDINATOR_GROUP = 0


def parse_bootstrap_servers(bootstrap_servers: str | list[str]) -> list[tuple[str, int]]:
    """"host:port,host:port" (or a list of them) → [(host, port)]; a bad entry raises
    KafkaException naming it."""
    entries = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    out = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise KafkaException(f"bootstrap server {entry!r} is not of the form host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise KafkaException("bootstrap.servers is empty: give at least one host:port")
    return out


class Cluster:
    """Bootstrap, metadata and per-node connections, shared by the client's objects."""

    def __init__(self, bootstrap_servers: str | list[str], client_id: str | None = "quafka",
                 request_timeout: float = 30.0, *, security: SecuritySettings = PLAINTEXT,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.bootstrap_addresses = parse_bootstrap_servers(bootstrap_servers)
        self.security = security
        self._ssl_context = ssl_context
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._connections: dict[int, BrokerConnection] = {}
        self._bootstrap: BrokerConnection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    # ------------------------------------------------------------------ connections

    def _new_connection(self, host: str, port: int, node_id: int) -> BrokerConnection:
        return BrokerConnection(host, port, self.client_id, node_id=node_id, request_timeout=self.request_timeout,
                                security=self.security, ssl_context=self._ssl_context)

    async def bootstrap(self) -> None:
        """Connect to the first reachable bootstrap address and read the cluster's brokers. No
        topic is described here (a Metadata request with an empty topic list): each client asks
        for the topics it uses, as Kafka's clients do (the Java `Metadata` bootstrap and
        librdkafka ask for their subscription, not every topic). Describing every topic for every
        consumer made 2,000 consumers joining over 201 topics cost the broker most of its time
        (docs/benchmarks.md, "Load and churn")."""
        await self._connect_bootstrap()
        await self.refresh_metadata([])

    async def _connect_bootstrap(self) -> None:
        errors = []
        for host, port in self.bootstrap_addresses:
            try:
                self._bootstrap = await self._new_connection(host, port, -1).connect()
                return
            except KafkaConnectionError as exc:
                errors.append(str(exc))
        tried = ", ".join(f"{h}:{p}" for h, p in self.bootstrap_addresses)
        raise KafkaConnectionError(f"no bootstrap server reachable (tried {tried}): " + "; ".join(errors))

    async def any_connection(self) -> BrokerConnection:
        """A live connection to some broker (a known node, else a bootstrap address)."""
        for node_id in sorted(self.brokers):
            try:
                return await self.connection(node_id)
            except KafkaConnectionError:
                continue
        if self._bootstrap is None or not self._bootstrap.connected:
            await self._connect_bootstrap()
        assert self._bootstrap is not None
        return self._bootstrap

    async def connection(self, node_id: int) -> BrokerConnection:
        """The connection to ``node_id``, opened (or reopened) on demand."""
        if self._closed:
            raise KafkaConnectionError("the cluster client is closed")
        async with self._lock:
            conn = self._connections.get(node_id)
            if conn is not None and conn.connected:
                return conn
            info = self.brokers.get(node_id)
            if info is None:
                raise KafkaException(f"node {node_id} is not in the cluster metadata (known: {sorted(self.brokers)})",
                                     retriable=True)
            if conn is not None:
                await conn.close()
            conn = await self._new_connection(info.host, info.port, node_id).connect()
            self._connections[node_id] = conn
            return conn

    async def close(self) -> None:
        self._closed = True
        connections = list(self._connections.values()) + ([self._bootstrap] if self._bootstrap else [])
        self._connections.clear()
        self._bootstrap = None
        for conn in connections:
            await conn.close()

    # ------------------------------------------------------------------ metadata

    async def refresh_metadata(self, topics: list[str] | None = None) -> None:
        """Metadata for ``topics`` (None: every topic); updates brokers and the topics' leaders."""
        conn = await self.any_connection()
        values = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        response = await conn.call(METADATA_KEY, values, min_version=METADATA_MIN_VERSION)
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                self.topics.pop(topic.name, None)
                continue
            partitions = {p.partition_index: PartitionInfo(p.partition_index, p.leader_id, p.leader_epoch,
                                                           ErrorCode(p.error_code)) for p in topic.partitions}
            self.topics[topic.name] = TopicInfo(topic.name, topic.topic_id, partitions, topic.is_internal)
        if topics is None:
            known = {t.name for t in response.topics if t.error_code == ErrorCode.none}
            for name in list(self.topics):
                if name not in known:
                    del self.topics[name]

    async def topic(self, name: str) -> TopicInfo:
        """The topic's metadata, fetched if not known; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
        if name not in self.topics:
            await self.refresh_metadata([name])
        info = self.topics.get(name)
        if info is None:
            raise KafkaException(f"topic {name!r} does not exist (UNKNOWN_TOPIC_OR_PARTITION)",
                                 ErrorCode.unknown_topic_or_partition)
        return info

    async def leader_for(self, topic: str, partition: int) -> int:
        """Node id of the partition's leader; retriable LEADER_NOT_AVAILABLE when it has none."""
        info = await self.topic(topic)
        part = info.partitions.get(partition)
        if part is None:
            raise KafkaException(f"topic {topic!r} has no partition {partition} "
                                 f"(partitions 0..{len(info.partitions) - 1})", ErrorCode.unknown_topic_or_partition)
        if part.leader_id < 0:
            raise KafkaException(f"{topic}-{partition} has no leader", ErrorCode.leader_not_available)
        return part.leader_id

    async def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        return await self.connection(await self.leader_for(topic, partition))

    # ------------------------------------------------------------------ coordinators

    async def find_coordinators(self, keys: list[str], key_type: int = COORDINATOR_GROUP) -> dict[str, int]:
        """{key: coordinator node id} of several keys: one FindCoordinator (v4+ batches keys, as
        Kafka's `CoordinatorStrategy` does), or one per key from a broker below v4."""
        conn = await self.any_connection()
        served = conn.api_versions.get(FIND_COORDINATOR_KEY)
        if len(keys) < 2 or served is None or served[1] < 4:
            return {key: await self.find_coordinator(key, key_type) for key in keys}
        response = await conn.call(FIND_COORDINATOR_KEY, {"key": "", "key_type": key_type, "coordinator_keys": keys},
                                   min_version=4)
        out: dict[str, int] = {}
        for entry in response.coordinators:
            if entry.error_code != ErrorCode.none:
                raise error_for_code(entry.error_code, f"FindCoordinator for {entry.key!r}")
            if entry.node_id not in self.brokers or self.brokers[entry.node_id][1:3] != (entry.host, entry.port):
                self.brokers[entry.node_id] = BrokerInfo(entry.node_id, entry.host, entry.port, None)
            out[entry.key] = entry.node_id
        return out

    async def find_coordinator(self, key: str, key_type: int = COORDINATOR_GROUP) -> int:
        """The node id coordinating ``key`` (a group id for key type 0); learns its address."""
        conn = await self.any_connection()
        response = await conn.call(FIND_COORDINATOR_KEY, {"key": key, "key_type": key_type, "coordinator_keys": (key,)},
                                   min_version=1)
        if hasattr(response, "coordinators"):
            [entry] = [c for c in response.coordinators if c.key == key]
        else:
            entry = response
        if entry.error_code != ErrorCode.none:
            raise error_for_code(entry.error_code, f"FindCoordinator for {key!r}")
        if entry.node_id not in self.brokers or self.brokers[entry.node_id][1:3] != (entry.host, entry.port):
            self.brokers[entry.node_id] = BrokerInfo(entry.node_id, entry.host, entry.port, None)
        return entry.node_id
