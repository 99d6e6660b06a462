"""poll_batches / acknowledge_range (quafka extension: undecoded acquired records, acknowledged by
range) against an embedded broker, for the blocking and the asyncio consumer."""

from __future__ import annotations

import asyncio
import pickle
import uuid

import pytest
from support import produce_batch, set_group_configs, wait_until

from quafka import EmbeddedBroker
from quafka.client import (
    AcknowledgeType,
    AcquiredBatches,
    Admin,
    AsyncShareConsumer,
    IllegalStateException,
    ShareConsumer,
)

EXPLICIT = {"share.acknowledgement.mode": "explicit"}


@pytest.fixture(scope="module")
def bootstrap():
    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers


def _topic_and_group(bootstrap: str, batches: int, per_batch: int) -> tuple[str, str]:
    topic, group = f"pb-{uuid.uuid4().hex[:8]}", f"pbg-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (1, 1)})
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", "share.assignment.interval.ms": "0"})
    for b in range(batches):
        produce_batch(bootstrap, topic, per_batch, tag=f"b{b}-")
    return topic, group


def _start_offset(bootstrap: str, group: str, topic: str) -> int:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.list_share_group_offsets(group, [topic]).get((topic, 0), (-1, -1))[0]


def test_poll_batches_hands_out_undecoded_batches_acknowledged_by_range(bootstrap):
    topic, group = _topic_and_group(bootstrap, batches=5, per_batch=40)
    config = {"bootstrap.servers": bootstrap, "group.id": group, **EXPLICIT,
              "share.acquire.mode": "record_limit", "max.poll.records": 120}
    got: list[AcquiredBatches] = []
    with ShareConsumer(config) as consumer:
        consumer.subscribe([topic])
        while sum(i.count for i in got) < 200:
            items = wait_until(lambda: consumer.poll_batches(0.5), 20, message="acquired batches")
            assert sum(i.count for i in items) <= 120  # max.poll.records with record_limit
            with pytest.raises(IllegalStateException, match="not acknowledged"):
                consumer.poll_batches(0)  # explicit mode: acknowledge first
            with pytest.raises(IllegalStateException, match="poll_batches"):
                consumer.poll(0)  # one style per consumer
            for item in items:
                item = pickle.loads(pickle.dumps(item))  # travels to another process as it is
                for first, last, _count in item.acquired:
                    consumer.acknowledge_range(item.topic, item.partition, first, last, AcknowledgeType.ACCEPT)
            assert all(err is None for err in consumer.commit_sync(10).values())
            got.extend(items)
        with pytest.raises(IllegalStateException, match="offset 0 is not a record delivered"):
            consumer.acknowledge_range(topic, 0, 0, 3)  # already committed
    records = [r for item in got for r in item.records()]
    assert [r.offset for r in records] == list(range(200))
    assert [r.value for r in records] == [f"b{b}-{i}".encode() for b in range(5) for i in range(40)]
    assert {r.delivery_count for r in records} == {1}
    assert wait_until(lambda: _start_offset(bootstrap, group, topic) == 200, 10, message="the group drained")


def test_async_poll_batches_release_and_redelivery(bootstrap):
    topic, group = _topic_and_group(bootstrap, batches=2, per_batch=10)
    config = {"bootstrap.servers": bootstrap, "group.id": group, **EXPLICIT}

    async def take_all(consumer: AsyncShareConsumer, kind: int) -> list[AcquiredBatches]:
        """Poll until 20 offsets came, acknowledging each poll's ranges with ``kind``."""
        loop = asyncio.get_running_loop()
        deadline, got = loop.time() + 20, []
        while sum(i.count for i in got) < 20:
            assert loop.time() < deadline, f"only {sum(i.count for i in got)} offsets"
            items = await consumer.poll_batches(0.5)
            for item in items:
                for first, last, _count in item.acquired:
                    consumer.acknowledge_range(item.topic, item.partition, first, last, kind)
            assert all(err is None for err in (await consumer.commit_sync(10)).values())
            got += items
        return got

    async def run() -> tuple[list, list]:
        consumer = AsyncShareConsumer(config)
        try:
            consumer.subscribe([topic])
            released = await take_all(consumer, AcknowledgeType.RELEASE)
            accepted = await take_all(consumer, AcknowledgeType.ACCEPT)
        finally:
            await consumer.close(5)
        return ([(r.offset, r.delivery_count) for i in released for r in i.records()],
                [(r.offset, r.delivery_count) for i in accepted for r in i.records()])

    released, accepted = asyncio.run(run())
    assert released == [(o, 1) for o in range(20)]
    assert accepted == [(o, 2) for o in range(20)]  # released once, delivered again with count 2
    assert wait_until(lambda: _start_offset(bootstrap, group, topic) == 20, 10, message="the group drained")


def test_poll_batches_needs_explicit_mode(bootstrap):
    topic, group = _topic_and_group(bootstrap, batches=1, per_batch=1)
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group}) as consumer:
        consumer.subscribe([topic])
        with pytest.raises(IllegalStateException, match="explicit"):
            consumer.poll_batches(0)
