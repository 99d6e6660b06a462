"""SIGKILL around a dead-letter write (KIP-1191): records persisted ARCHIVING are written to the DLQ
when their share partition is loaded again (Kafka's `SharePartition.maybeResumeDlqArchiving`), and
end ARCHIVED. Killed before the DLQ write, the record reaches the DLQ once; killed after the DLQ
write and before the ARCHIVED state was persisted, it is not written twice (quafka looks for it in
the DLQ partition first, where Kafka would write it again; docs/dead-letters.md)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import AcknowledgeType

from support import set_group_configs, wait_until
from support.dlq import DLQ_TOPIC_CONFIGS, consume_and_ack, headers_of, produce, read_all, share_consumer
from support.share_client import create_topic

from quafka.protocol.dead_letter_headers import HEADER_OFFSET, HEADER_REASON

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_dlq_broker_child.py")


class Child:
    """The broker child and its stdout lines (read on a thread, so that a wait has a deadline)."""

    def __init__(self, data_dir: str, mode: str) -> None:
        self.proc = subprocess.Popen([sys.executable, CHILD, data_dir, mode], stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout_s: float = 20.0) -> dict:
        try:
            got = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"the broker child printed nothing for {timeout_s} s") from None
        assert got is not None, f"the broker child exited with {self.proc.wait()}"
        return got


def share_start_offset(broker, group: str, topic: str):
    def read():
        for (g, _tid, _p), ctx in broker.server.share_partitions.contexts.items():
            if g == group and ctx.topic.name == topic:
                return ctx.share_partition.start_offset
        return None
    return broker.call(read)


@pytest.mark.parametrize("mode", ["before-write", "after-write"])
def test_sigkill_around_the_dlq_write_leaves_each_record_in_the_dlq_once(tmp_path, make_broker, mode):
    data_dir = str(tmp_path / "data")
    child = Child(data_dir, mode)
    proc = child.proc
    bs = child.next()["bootstrap"]
    try:
        create_topic(bs, "orders", 1)
        create_topic(bs, "dlq.orders", 1, DLQ_TOPIC_CONFIGS)
        set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest",
                                    "errors.deadletterqueue.topic.name": "dlq.orders"})
        produce(bs, "orders", [(None, b"poison", None), (None, b"fine", None)])
        consumer = share_consumer(bs, "g")
        consumer.subscribe(["orders"])
        try:
            consume_and_ack(consumer, 2, lambda m: AcknowledgeType.REJECT if m.value() == b"poison"
                            else AcknowledgeType.ACCEPT)
            stalled = child.next()  # ARCHIVING is durable; the DLQ write is stopped
            assert stalled == {"stalled": [[0, 0]]}
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            consumer.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)

    broker = make_broker(data_dir=data_dir)
    bs = broker.bootstrap_servers
    consumer = share_consumer(bs, "g")  # loading the share partition resumes the ARCHIVING record
    consumer.subscribe(["orders"])
    try:
        deadline = time.monotonic() + 15
        while share_start_offset(broker, "g", "orders") != 2 and time.monotonic() < deadline:
            assert list(consumer.poll(0.2)) == []  # nothing is delivered again
    finally:
        consumer.close()
    assert share_start_offset(broker, "g", "orders") == 2
    letters = read_all(bs, "dlq.orders", expect=1)  # exactly once
    assert headers_of(letters[0])[HEADER_OFFSET] == "0"
    expected_reason = "recovered" if mode == "before-write" else "rejected"
    assert headers_of(letters[0])[HEADER_REASON] == expected_reason
    broker.stop()  # the ARCHIVED state itself is durable: a third start has nothing to resume
    again = make_broker(data_dir=data_dir)
    consumer = share_consumer(again.bootstrap_servers, "g")
    consumer.subscribe(["orders"])
    try:
        wait_until(lambda: share_start_offset(again, "g", "orders") == 2 or list(consumer.poll(0.2)),
                   message="share partition loaded")
    finally:
        consumer.close()
    assert share_start_offset(again, "g", "orders") == 2
    read_all(again.bootstrap_servers, "dlq.orders", expect=1)


def test_a_recovered_range_writes_only_the_offsets_missing_from_the_dlq(make_broker):
    """The offsets a crash left ARCHIVING need not be a prefix written before it: share-state
    batches of equal state and count are stored merged, so [7, 9] written to the DLQ and [5, 6]
    not yet are one ARCHIVING batch [5, 9] at restart. The recovered write skips every offset
    already in the DLQ partition with the same group, topic, partition and state epoch."""
    import asyncio

    from quafka.broker.core.share_partition import DeadLetterWrite

    broker = make_broker()
    bs = broker.bootstrap_servers
    create_topic(bs, "orders", 1)
    create_topic(bs, "dlq.orders", 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": "dlq.orders"})
    produce(bs, "orders", [(None, b"r%d" % i, None) for i in range(5)])
    consumer = share_consumer(bs, "g")
    consumer.subscribe(["orders"])
    try:
        consume_and_ack(consumer, 5, lambda m: AcknowledgeType.REJECT if m.offset() in (2, 3)
                        else AcknowledgeType.ACCEPT)
        read_all(bs, "dlq.orders", expect=2)
    finally:
        consumer.close()

    def run(state_epoch: int) -> int:
        """The recovered write of offsets 0-4 as at a share-partition load with this state epoch."""
        async def go():
            ctx = next(c for c in broker.server.share_partitions.contexts.values() if c.group_id == "g")
            saved, ctx.state_epoch = ctx.state_epoch, state_epoch
            try:
                return await broker.server.share_partitions.dead_letters.write(
                    ctx, [DeadLetterWrite(0, 4, 1, "recovered")])
            finally:
                ctx.state_epoch = saved
        return asyncio.run_coroutine_threadsafe(go(), broker._loop).result(10)

    epoch = broker.call(lambda: next(c for c in broker.server.share_partitions.contexts.values()
                                     if c.group_id == "g").state_epoch)
    assert run(epoch) == 3  # 0, 1 and 4; 2 and 3 were there
    letters = read_all(bs, "dlq.orders", expect=5)
    assert sorted(int(headers_of(m)[HEADER_OFFSET]) for m in letters) == [0, 1, 2, 3, 4]
    assert run(epoch + 1) == 5  # another state epoch (the offsets were altered since): all new
