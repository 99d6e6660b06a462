"""SIGKILL around a dead-letter write (KIP-1191): records persisted ARCHIVING are written to the DLQ
when their share partition is loaded again (Kafka's `SharePartition.maybeResumeDlqArchiving`), and
end ARCHIVED. Killed before the DLQ write, the record reaches the DLQ once; killed after the DLQ
write and before the ARCHIVED state was persisted, it is not written twice (quafka looks for it in
the DLQ partition first, where Kafka would write it again; docs/dead-letters.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import AcknowledgeType

from support import set_group_configs, wait_until
from support.dlq import DLQ_TOPIC_CONFIGS, consume_and_ack, headers_of, produce, read_all, share_consumer
from support.share_client import create_topic

from quafka.protocol.dead_letter_headers import HEADER_OFFSET, HEADER_REASON

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_dlq_broker_child.py")


def start_child(data_dir: str, mode: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, CHILD, data_dir, mode], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    line = proc.stdout.readline()
    assert line, "the broker child did not start"
    return proc, json.loads(line)["bootstrap"]


def share_start_offset(broker, group: str, topic: str):
    def read():
        for (g, _tid, _p), ctx in broker.server.share_partitions.contexts.items():
            if g == group and ctx.topic.name == topic:
                return ctx.sp.start_offset
        return None
    return broker.call(read)


@pytest.mark.parametrize("mode", ["before-write", "after-write"])
def test_sigkill_around_the_dlq_write_leaves_each_record_in_the_dlq_once(tmp_path, make_broker, mode):
    data_dir = str(tmp_path / "data")
    proc, bs = start_child(data_dir, mode)
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
            stalled = json.loads(proc.stdout.readline())  # ARCHIVING is durable; the DLQ write is stopped
            assert stalled == {"stalled": [0, 0]}
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
