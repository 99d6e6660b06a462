"""BrokerConnection and Cluster against a real (embedded) broker."""

from __future__ import annotations

import asyncio
import time

import pytest
from support import free_port

from quafka.client._cluster import Cluster
from quafka.client._transport import BrokerConnection
from quafka.client.errors import KafkaConnectionError, KafkaException, KafkaTimeoutError
from quafka.client.reader import FETCH_KEY, fetch_values
from quafka.protocol.errors import ErrorCode


def _address(broker) -> tuple[str, int]:
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    return host, int(port)


async def _until(condition, timeout_s: float = 5.0) -> None:
    """Poll a condition from a coroutine with a deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def _metadata_values() -> dict:
    return {"topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}


def test_connect_negotiates_the_highest_common_version_within_the_callers_range(broker):
    async def main():
        conn = await BrokerConnection(*_address(broker), "t").connect()
        try:
            low, high = conn.api_versions[3]
            assert conn.version_for(3) == min(high, 13)
            assert conn.version_for(3, 12, 12) == 12
            with pytest.raises(KafkaException, match="no version in common") as info:
                conn.version_for(3, 99)
            assert info.value.code == ErrorCode.unsupported_version
            from quafka.client._wire import build_entity, request_class
            too_new = build_entity(request_class(3, 13), _metadata_values())
            conn.api_versions[3] = (0, 12)  # as if the broker served less than kio knows
            with pytest.raises(KafkaException, match=r"does not serve metadata \(key 3\) v13 \(it serves v0-v12\)"):
                await conn.request(too_new)
            assert conn.connected
        finally:
            await conn.close()

    asyncio.run(main())


def test_pipelined_requests_are_matched_to_their_responses(broker, create_topic):
    create_topic(broker.bootstrap_servers, "pipelined", 2)

    async def main():
        conn = await BrokerConnection(*_address(broker), "t").connect()
        try:
            responses = await asyncio.gather(*(
                conn.call(3, {**_metadata_values(), "topics": [{"name": name, "topic_id": None}]}, min_version=12)
                for name in ["pipelined", "missing"] * 10))
            for i, response in enumerate(responses):
                [topic] = response.topics
                assert topic.name == ("pipelined", "missing")[i % 2]
                expected = ErrorCode.none if i % 2 == 0 else ErrorCode.unknown_topic_or_partition
                assert topic.error_code == expected
        finally:
            await conn.close()

    asyncio.run(main())


def test_an_unreachable_bootstrap_address_raises_a_connection_error_naming_it():
    address = f"127.0.0.1:{free_port()}"

    async def main():
        cluster = Cluster(address)
        with pytest.raises(KafkaConnectionError, match=address) as info:
            await cluster.bootstrap()
        assert info.value.retriable

    asyncio.run(main())


def test_bootstrap_tries_each_address_in_turn(broker):
    async def main():
        cluster = Cluster(f"127.0.0.1:{free_port()},{broker.bootstrap_servers}")
        try:
            await cluster.bootstrap()
            assert cluster.brokers and cluster.cluster_id
        finally:
            await cluster.close()

    asyncio.run(main())


def test_cluster_knows_topic_ids_leaders_and_the_group_coordinator(broker, create_topic):
    create_topic(broker.bootstrap_servers, "three", 3)

    async def main():
        cluster = Cluster(broker.bootstrap_servers)
        try:
            await cluster.bootstrap()
            info = await cluster.topic("three")
            assert info.topic_id is not None and sorted(info.partitions) == [0, 1, 2]
            [node_id] = cluster.brokers
            assert [await cluster.leader_for("three", p) for p in range(3)] == [node_id] * 3
            conn = await cluster.leader_connection("three", 2)
            assert conn is await cluster.connection(node_id) and conn.node_id == node_id
            assert await cluster.find_coordinator("some-group") == node_id
            with pytest.raises(KafkaException, match="'nope' does not exist") as missing:
                await cluster.topic("nope")
            assert missing.value.code == ErrorCode.unknown_topic_or_partition
            with pytest.raises(KafkaException, match="no partition 3"):
                await cluster.leader_for("three", 3)
        finally:
            await cluster.close()

    asyncio.run(main())


def _parked_fetch(topic_id) -> dict:
    # waits up to 10 s for data on an empty partition: the request stays in flight
    return fetch_values("parked", topic_id, 0, 0, max_wait_ms=10_000, max_bytes=1 << 20,
                        partition_max_bytes=1 << 20)


def test_stopping_the_broker_fails_a_pending_request_with_a_retriable_error(make_broker, create_topic):
    broker = make_broker()
    create_topic(broker.bootstrap_servers, "parked")

    async def main():
        cluster = Cluster(broker.bootstrap_servers)
        try:
            await cluster.bootstrap()
            conn = await cluster.leader_connection("parked", 0)
            topic_id = (await cluster.topic("parked")).topic_id
            pending = asyncio.ensure_future(conn.call(FETCH_KEY, _parked_fetch(topic_id), min_version=4))
            await _until(lambda: conn._wire.in_flight)
            await asyncio.to_thread(broker.stop)
            with pytest.raises(KafkaConnectionError, match=conn.address) as info:
                await pending
            assert info.value.retriable
            with pytest.raises(KafkaConnectionError):  # the connection stays failed
                await conn.call(3, _metadata_values())
        finally:
            await cluster.close()

    asyncio.run(main())


def test_a_request_that_outlives_its_timeout_raises_and_closes_the_connection(broker, create_topic):
    create_topic(broker.bootstrap_servers, "parked")

    async def main():
        cluster = Cluster(broker.bootstrap_servers, request_timeout=0.3)
        try:
            await cluster.bootstrap()
            conn = await cluster.leader_connection("parked", 0)
            topic_id = (await cluster.topic("parked")).topic_id
            with pytest.raises(KafkaTimeoutError, match=r"got no response within 0.3s") as info:
                await conn.call(FETCH_KEY, _parked_fetch(topic_id), min_version=4)
            assert info.value.retriable and not conn.connected
            # the cluster reopens a fresh connection on the next use
            fresh = await cluster.leader_connection("parked", 0)
            assert fresh is not conn and fresh.connected
        finally:
            await cluster.close()

    asyncio.run(main())
