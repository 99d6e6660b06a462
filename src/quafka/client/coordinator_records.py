"""The codecs of the share coordinators' records (``__share_group_state`` and the share-group records of
``__consumer_offsets``) and their placement, re-exported for tools and the Spark audit job from
``quafka.protocol.share_state_records``, ``quafka.protocol.share_group_records``,
``quafka.protocol.coordinator_record_codec`` and ``quafka.protocol.partition_placement``. See those
modules for the formats."""

from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC, CorruptRecord, UnknownRecordType
from quafka.protocol.partition_placement import group_partition, kafka_uuid_str, share_state_partition
from quafka.protocol.share_group_records import (
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    SHARE_GROUP_MEMBER_METADATA,
    SHARE_GROUP_METADATA,
    SHARE_GROUP_STATE_PARTITION_METADATA,
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    GroupRecord,
    decode_group_record,
    encode_group_record,
)
from quafka.protocol.share_state_records import (
    SHARE_GROUP_STATE_TOPIC,
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    STATE_ACKNOWLEDGED,
    STATE_ARCHIVED,
    STATE_ARCHIVING,
    STATE_AVAILABLE,
    ShareSnapshotValue,
    ShareStateKey,
    ShareStateRecord,
    ShareUpdateValue,
    StateBatch,
    decode_share_state_record,
    encode_share_state_key,
    encode_share_state_record,
    encode_share_state_value,
)

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT",
    "SHARE_GROUP_MEMBER_METADATA",
    "SHARE_GROUP_METADATA",
    "SHARE_GROUP_STATE_PARTITION_METADATA",
    "SHARE_GROUP_STATE_TOPIC",
    "SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER",
    "SHARE_GROUP_TARGET_ASSIGNMENT_METADATA",
    "SHARE_SNAPSHOT",
    "SHARE_UPDATE",
    "STATE_ACKNOWLEDGED",
    "STATE_ARCHIVED",
    "STATE_ARCHIVING",
    "STATE_AVAILABLE",
    "CorruptRecord",
    "GroupRecord",
    "ShareSnapshotValue",
    "ShareStateKey",
    "ShareStateRecord",
    "ShareUpdateValue",
    "StateBatch",
    "UnknownRecordType",
    "decode_group_record",
    "decode_share_state_record",
    "encode_group_record",
    "encode_share_state_key",
    "encode_share_state_record",
    "encode_share_state_value",
    "group_partition",
    "kafka_uuid_str",
    "share_state_partition",
]
