"""The metadata journal: durable before the response, torn tails cut, compaction, node id check."""

from __future__ import annotations

import os

import pytest

from quafka.broker.server import metadata_store as ms
from quafka.broker.server.metadata_store import MetadataStore, MetadataStoreError

TOPIC = {"type": "topic", "name": "a", "topic_id": "ab" * 16, "partitions": 1, "configs": {}}


def journal_path(d):
    return os.path.join(d, ms.JOURNAL_DIR, ms.JOURNAL_FILE)


def test_records_survive_reopen_with_the_same_cluster_id(tmp_path):
    store = MetadataStore(str(tmp_path), 1)
    md = store.load()
    store.commit([TOPIC, {"type": "partitions", "name": "a", "count": 3}])
    store.close()
    again = MetadataStore(str(tmp_path), 1).load()
    assert again.cluster_id == md.cluster_id
    assert again.topics["a"].partitions == 3


def test_commit_fsyncs_before_returning(tmp_path, monkeypatch):
    store = MetadataStore(str(tmp_path), 1)
    store.load()
    calls = []
    monkeypatch.setattr(ms.os, "fsync", lambda fd: calls.append(fd))
    store.commit([TOPIC])
    assert calls, "the journal must be fsynced before commit returns"


def test_torn_tail_is_cut_and_earlier_records_kept(tmp_path):
    store = MetadataStore(str(tmp_path), 1)
    store.load()
    store.commit([TOPIC])
    store.close()
    with open(journal_path(str(tmp_path)), "ab") as f:
        f.write(b'0badc0de {"type":"remove_topic","name":"a"}\n')  # bad checksum
        f.write(b'00000000 {"type":"rem')  # torn
    again = MetadataStore(str(tmp_path), 1)
    md = again.load()
    assert "a" in md.topics
    again.commit([{"type": "partitions", "name": "a", "count": 2}])
    again.close()
    assert MetadataStore(str(tmp_path), 1).load().topics["a"].partitions == 2


def test_journal_is_compacted_into_a_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(ms, "COMPACT_AFTER_RECORDS", 10)
    store = MetadataStore(str(tmp_path), 1)
    store.load()
    store.commit([TOPIC])
    for i in range(30):
        store.commit([{"type": "topic_configs", "name": "a", "configs": {"retention.ms": str(i)}}])
    store.close()
    with open(journal_path(str(tmp_path)), "rb") as f:
        lines = f.read().splitlines()
    assert len(lines) <= 11
    md = MetadataStore(str(tmp_path), 1).load()
    assert md.topics["a"].configs == {"retention.ms": "29"}


def test_a_different_node_id_refuses_to_start(tmp_path):
    MetadataStore(str(tmp_path), 1).load()
    with pytest.raises(MetadataStoreError, match="node.id"):
        MetadataStore(str(tmp_path), 2).load()
