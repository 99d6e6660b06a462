"""Share state that outlived the data it describes (issue 28, item 4).

With log flush off (the default), a machine crash can cut the data log's unflushed tail while the
share-state write that followed it survived: the stored start offset (and state batches) then lie
past the log end. Records produced again at those offsets are new ones, and must be delivered; the
broker cuts the stored state at the log end it found at start-up (as `__share_group_state` is
replayed, before anything can read it), stores the cut, and says so in a warning. (Kafka takes the stored start offset as it is — SharePartition.maybeInitialize
— so records produced below it are never delivered.) The crash is simulated by writing the state a
lost tail would have left directly to the share coordinator, then restarting the broker.
"""

from __future__ import annotations

import logging

import pytest

from support import set_group_configs, wait_until
from support.share_client import ACCEPT, ShareClient, acquired_offsets, coalesce, create_topic, produce

from quafka.broker.core.record_state import RecordState
from quafka.protocol.share_state_records import ShareStateKey, StateBatch

pytestmark = pytest.mark.timeout(60)

GROUP = "recovering-group"
TOPIC = "recovering-topic"
NONE = 0


def fetch_and_accept(client: ShareClient, topic_id, n: int) -> list[tuple[int, int]]:
    """Fetch until `n` records are acquired, accept them; their (offset, delivery count)."""
    got: list[tuple[int, int]] = []

    def step():
        resp = client.fetch(max_wait_ms=100)
        assert resp.error_code == NONE, resp
        got.extend(acquired_offsets(resp).get((topic_id, 0), ()))
        return len(got) >= n

    wait_until(step, 15, 0, message=f"{n} records acquired (got {got})")
    resp = client.acknowledge({(topic_id, 0): coalesce([o for o, _ in got], ACCEPT)})
    assert [p.error_code for t in resp.responses for p in t.partitions] == [NONE], resp
    return got


def stored_state(broker, key):
    return broker.call(lambda: broker.server.share_coordinator.coordinator.state(key))


def test_a_start_offset_past_the_log_end_is_cut_at_load_and_records_produced_later_are_delivered(
        make_broker, tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [b"before-%d" % i for i in range(4)])  # offsets 0..3
    with ShareClient(bootstrap, GROUP) as member:
        member.join([TOPIC])
        member.wait_for_assignment()
        assert [o for o, _ in fetch_and_accept(member, topic_id, 4)] == [0, 1, 2, 3]
        member.leave()
    key = ShareStateKey(GROUP, topic_id, 0)
    wait_until(lambda: stored_state(broker, key).start_offset == 4, message="start offset 4 stored")

    # what a crash leaves when records 4..12 had been delivered and partly accepted, the share state
    # written, and the log's unflushed tail (4..12) lost: state past the log end (4)
    def write_lost_tail_state():
        share_coordinator = broker.server.share_coordinator
        epoch = share_coordinator.coordinator.state(key).state_epoch
        return share_coordinator.write(
            key, state_epoch=epoch, start_offset=10, delivery_complete_count=2,
            state_batches=(StateBatch(10, 10, int(RecordState.AVAILABLE), 1),
                           StateBatch(11, 12, int(RecordState.ACKNOWLEDGED), 1)))

    written = broker.call(write_lost_tail_state)
    wait_until(lambda: broker.call(written.done), message="the state write")
    assert broker.call(written.result) == 0
    broker.stop()

    caplog.set_level(logging.WARNING, logger="quafka.share_coordinator")
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    cut = stored_state(broker, key)  # cut as the state loaded, before any record could be produced
    assert (cut.start_offset, cut.state_batches, cut.delivery_complete_count) == (4, (), 0)
    produce(bootstrap, TOPIC, [b"after-%d" % i for i in range(10)])  # offsets 4..13
    with ShareClient(bootstrap, GROUP) as member:
        member.join([TOPIC])
        member.wait_for_assignment()
        got = fetch_and_accept(member, topic_id, 10)  # before the fix: only 10 (count 2) and 13
        member.leave()
    assert got == [(o, 1) for o in range(4, 14)]
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "quafka.share_coordinator" and r.levelno == logging.WARNING]
    assert any("reaches offset 12 (start offset 10) but the log ends at 4" in m for m in warnings), warnings
    wait_until(lambda: stored_state(broker, key).start_offset == 14, message="the accepted records stored")


def test_a_stored_state_reaching_past_the_log_end_is_cut_there_and_the_cut_is_stored(make_broker, tmp_path):
    """The start offset is inside the log but the batches after it reach past its end: the offsets
    past the end lose their stale state (here ACKNOWLEDGED, which would skip the new records)."""
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [b"before-%d" % i for i in range(4)])  # offsets 0..3
    with ShareClient(bootstrap, GROUP) as member:
        member.join([TOPIC])
        member.wait_for_assignment()
        fetch_and_accept(member, topic_id, 2)  # nothing more than 2 asked, but all 4 may come
        member.leave()
    key = ShareStateKey(GROUP, topic_id, 0)
    start = wait_until(lambda: stored_state(broker, key).start_offset, message="a start offset stored")

    def write_lost_tail_state():
        share_coordinator = broker.server.share_coordinator
        st = share_coordinator.coordinator.state(key)
        return share_coordinator.write(
            key, state_epoch=st.state_epoch, start_offset=st.start_offset,
            delivery_complete_count=st.delivery_complete_count + 5,
            state_batches=(StateBatch(5, 9, int(RecordState.ACKNOWLEDGED), 1),))

    written = broker.call(write_lost_tail_state)
    wait_until(lambda: broker.call(written.done), message="the state write")
    assert broker.call(written.result) == 0
    broker.stop()

    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    produce(bootstrap, TOPIC, [b"after-%d" % i for i in range(6)])  # offsets 4..9
    with ShareClient(bootstrap, GROUP) as member:
        member.join([TOPIC])
        member.wait_for_assignment()
        got = fetch_and_accept(member, topic_id, 10 - start)  # before the fix: 5..9 never delivered
        member.leave()
    assert sorted(o for o, _ in got) == list(range(start, 10))
    wait_until(lambda: stored_state(broker, key).start_offset == 10, message="the accepted records stored")
