"""The DLQ partition follows the broker's flush policy (issue 28, item 7).

A dead letter used to be fsynced on every write, even with flush off (the default), where no other
partition — not the share state that archives its record either — is fsynced. Now it is fsynced
only when the flush policy asks: its own `flush.messages` reached, or the share-state writes
fsynced (then first, so that a dead letter whose ARCHIVED state survives a machine crash survives
it too). With flush off, the dead letter is still in the segment file before ARCHIVED is appended.
"""

from __future__ import annotations

import pytest

from support import set_group_configs, wait_until
from support.share_client import REJECT, ShareClient, acquired_offsets, coalesce, create_topic, produce

pytestmark = pytest.mark.timeout(60)

GROUP = "g"
TOPIC = "jobs"
DLQ = "dlq.jobs"
NONE = 0


def reject_one_record(broker) -> None:
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    create_topic(bootstrap, DLQ, 1, {"errors.deadletterqueue.group.enable": "true"})
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest",
                                         "errors.deadletterqueue.topic.name": DLQ})
    produce(bootstrap, TOPIC, [b"poison"])
    with ShareClient(bootstrap, GROUP) as member:
        member.join([TOPIC])
        member.wait_for_assignment()
        got: list[int] = []

        def fetched():
            resp = member.fetch(max_wait_ms=100)
            assert resp.error_code == NONE, resp
            got.extend(o for o, _ in acquired_offsets(resp).get((topic_id, 0), ()))
            return got

        wait_until(fetched, 15, 0, message="the record acquired")
        resp = member.acknowledge({(topic_id, 0): coalesce(got, REJECT)})
        assert [p.error_code for t in resp.responses for p in t.partitions] == [NONE], resp

    def archived():  # dead-lettered, then archived: the start offset passed it
        ctxs = broker.server.share_partitions.contexts.values()
        return any(c.topic.name == TOPIC and c.share_partition.start_offset == 1 for c in ctxs)

    wait_until(lambda: broker.call(archived), message="the record dead-lettered and archived")


def dlq_log(broker):
    return broker.server.state.topics[DLQ].partitions[0].log


def test_with_flush_off_the_dead_letter_is_written_but_not_fsynced(make_broker):
    broker = make_broker()
    reject_one_record(broker)
    end, flushed = broker.call(lambda: (dlq_log(broker).log_end_offset, dlq_log(broker).flushed_offset))
    assert end == 1
    assert flushed == 0  # before: 1, an fsync for every dead-letter write


def test_with_flush_on_the_dead_letter_is_fsynced_before_its_record_is_archived(make_broker):
    broker = make_broker(config={"log.flush.interval.messages": 1})
    reject_one_record(broker)
    assert broker.call(lambda: dlq_log(broker).flushed_offset) == 1
