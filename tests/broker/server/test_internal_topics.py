"""The coordinators' internal topics: created on first use with the configured partition counts,
flagged internal in Metadata, and written only by the coordinators (clients get
INVALID_TOPIC_EXCEPTION, as Kafka answers a produce to an internal topic)."""

from __future__ import annotations

import datetime

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from support import RawClient
from support.share_client import ShareClient

from quafka.protocol.errors import ErrorCode
from quafka.protocol.record_batch import build_batch

CONFIG = {"share.coordinator.state.topic.num.partitions": 5, "offsets.topic.num.partitions": 3}


def metadata(raw: RawClient, name: str):
    resp = raw.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=name),),
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return resp.topics[0]


def produce(raw: RawClient, topic: str) -> ErrorCode:
    req = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=build_batch([(b"k", b"v")])),)),))
    return raw.request(req).responses[0].partition_responses[0].error_code


def test_internal_topics_appear_on_first_share_group_use_with_the_configured_partitions(make_broker):
    broker = make_broker(config=CONFIG)
    assert "__share_group_state" not in broker.server.state.topics
    broker.call(lambda: broker.server.state.create_topic("work", 1, 1, {}))
    with ShareClient(broker.bootstrap_servers, "g") as member:
        member.join(["work"])
        member.wait_for_assignment()
    with RawClient(broker.bootstrap_servers) as raw:
        state_topic = metadata(raw, "__share_group_state")
        offsets_topic = metadata(raw, "__consumer_offsets")
        user_topic = metadata(raw, "work")
    assert state_topic.error_code == ErrorCode.none and state_topic.is_internal and len(state_topic.partitions) == 5
    assert offsets_topic.error_code == ErrorCode.none and offsets_topic.is_internal
    assert len(offsets_topic.partitions) == 3
    assert not user_topic.is_internal


def test_clients_cannot_produce_to_internal_topics_but_may_to_double_underscore_names(make_broker):
    broker = make_broker(config=CONFIG)
    broker.call(lambda: broker.server.state.create_topic("work", 1, 1, {}))
    broker.call(lambda: broker.server.state.create_topic("__mine", 1, 1, {}))
    with ShareClient(broker.bootstrap_servers, "g") as member:
        member.join(["work"])
        member.wait_for_assignment()
    before = broker.server.state.topics["__share_group_state"].partitions[0].log.log_end_offset
    with RawClient(broker.bootstrap_servers) as raw:
        assert produce(raw, "__share_group_state") == ErrorCode.invalid_topic_exception
        assert produce(raw, "__consumer_offsets") == ErrorCode.invalid_topic_exception
        assert produce(raw, "__mine") == ErrorCode.none
        assert not metadata(raw, "__mine").is_internal
    assert broker.server.state.topics["__share_group_state"].partitions[0].log.log_end_offset == before
