import pytest

from quafka.broker.core.metadata import PRODUCER_ID_BLOCK_SIZE, ClusterMetadata, MetadataError, ProducerIdAllocator


def replayed(records):
    md = ClusterMetadata(cluster_id="c", node_id=1)
    for r in records:
        md.replay(r)
    return md


def test_topic_records_replay_into_topics_and_ids():
    md = replayed([
        {"type": "topic", "name": "a", "topic_id": "ab" * 16, "partitions": 3, "configs": {"retention.ms": "1"}},
        {"type": "partitions", "name": "a", "count": 5},
        {"type": "topic_configs", "name": "a", "configs": {}},
    ])
    assert md.topics["a"].partitions == 5
    assert md.topics["a"].configs == {}
    assert md.topics_by_id["ab" * 16].name == "a"


def test_remove_topic_forgets_name_and_id():
    md = replayed([
        {"type": "topic", "name": "a", "topic_id": "ab" * 16, "partitions": 1, "configs": {}},
        {"type": "remove_topic", "name": "a"},
    ])
    assert md.topics == {} and md.topics_by_id == {}


def test_snapshot_records_rebuild_the_same_image():
    md = replayed([
        {"type": "topic", "name": "a", "topic_id": "ab" * 16, "partitions": 2, "configs": {"x": "y"}},
        {"type": "broker_configs", "resource": "", "configs": {"log.retention.ms": "5"}},
        {"type": "producer_ids", "next": 3000},
    ])
    again = replayed(md.snapshot_records())
    assert again.topics == md.topics
    assert again.broker_configs == md.broker_configs
    assert again.next_producer_id == 3000


def test_empty_broker_configs_record_clears_the_resource():
    md = replayed([
        {"type": "broker_configs", "resource": "1", "configs": {"a": "b"}},
        {"type": "broker_configs", "resource": "1", "configs": {}},
    ])
    assert md.broker_configs == {}


def test_bad_records_raise_metadata_error():
    with pytest.raises(MetadataError):
        replayed([{"type": "nonsense"}])
    with pytest.raises(MetadataError):
        replayed([{"type": "partitions", "name": "missing", "count": 1}])


def test_producer_ids_are_never_handed_out_twice_across_restarts():
    md = ClusterMetadata(cluster_id="c", node_id=1)
    alloc = ProducerIdAllocator(md)
    pid, record = alloc.next_id()
    assert pid == 0 and record == {"type": "producer_ids", "next": PRODUCER_ID_BLOCK_SIZE}
    md.replay(record)
    pid2, record2 = alloc.next_id()
    assert pid2 == 1 and record2 is None
    # restart: everything below the recorded bound counts as used
    restarted = ProducerIdAllocator(replayed([record]))
    pid3, record3 = restarted.next_id()
    assert pid3 == PRODUCER_ID_BLOCK_SIZE and record3 is not None
