"""quafka's Python client: a sans-I/O protocol core (``_wire``) under an asyncio transport
(``_transport``, ``_cluster``), with blocking classes that drive the asyncio ones from a private
event loop thread (``_sync``). Imports nothing from quafka but ``quafka.protocol``.

Public so far: Admin / AsyncAdmin (topic, offset, config and group administration),
PartitionReader / AsyncPartitionReader (Fetch by offset, no group), Record, the errors, and
``share_state`` (the share-state record codecs).
"""

from . import share_state
from .admin import (
    Admin,
    AsyncAdmin,
    ListedGroup,
    NewTopic,
    PartitionDescription,
    ShareGroupDescription,
    ShareMemberDescription,
    TopicDescription,
)
from .errors import (
    ConfigException,
    CorruptRecordException,
    IllegalStateException,
    KafkaConnectionError,
    KafkaException,
    KafkaTimeoutError,
    RecordDeserializationException,
)
from .reader import AsyncPartitionReader, PartitionReader
from .records import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Record

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncPartitionReader",
    "ConfigException",
    "CorruptRecordException",
    "IllegalStateException",
    "KafkaConnectionError",
    "KafkaException",
    "KafkaTimeoutError",
    "ListedGroup",
    "NewTopic",
    "PartitionDescription",
    "PartitionReader",
    "Record",
    "RecordDeserializationException",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TopicDescription",
    "share_state",
]
