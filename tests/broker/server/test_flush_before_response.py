"""Acceptance 7 at the broker level: with log.flush.interval.messages=1 the segment is fsynced
before the Produce response leaves; with the default it is not fsynced on produce."""

from __future__ import annotations

import os
from datetime import timedelta

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from support import RawClient

from quafka.protocol.record_batch import build_batch


def produce(raw: RawClient, topic: str):
    req = ProduceRequest(transactional_id=None, acks=-1, timeout=timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(
            index=0, records=build_batch([(None, b"x")], base_timestamp=1)),)),))
    return raw.request(req).responses[0].partition_responses[0]


def run(make_broker, monkeypatch, config):
    broker = make_broker(config=config)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("f", 1, 1)])["f"].result(10)
    responses_received = []
    syncs = []  # for each data sync: how many responses the client had received at that moment
    real = os.fdatasync

    def recording_fdatasync(fd):
        syncs.append(len(responses_received))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
    with RawClient(broker.bootstrap_servers) as raw:
        for i in range(3):
            assert produce(raw, "f").error_code == 0
            responses_received.append(i)
    monkeypatch.setattr(os, "fdatasync", real)
    return syncs


def test_flush_interval_messages_1_fsyncs_before_each_response(make_broker, monkeypatch):
    syncs = run(make_broker, monkeypatch, {"log.flush.interval.messages": 1})
    # one sync per produce request, each before the client had that request's response
    assert syncs[:3] == [0, 1, 2]


def test_default_flush_settings_do_not_fsync_on_produce(make_broker, monkeypatch):
    assert run(make_broker, monkeypatch, {}) == []
