"""quafka's Python client: a sans-I/O protocol core (``_wire``) under an asyncio transport
(``_transport``, ``_cluster``), with blocking classes that drive the asyncio ones from a private
event loop thread (``_sync``). Imports nothing from quafka but ``quafka.protocol``.

Public: ShareConsumer / AsyncShareConsumer (share groups, KIP-932, as Kafka 4.2+), Admin /
AsyncAdmin (topic, offset, config and group administration), PartitionReader /
AsyncPartitionReader (Fetch by offset, no group), Record, TopicPartition, AcknowledgeType, the
errors, and ``coordinator_records`` (the codecs of the share-state and group records). See docs/client.md.
"""

from . import coordinator_records
from ._admin_acls import AclBinding, AclBindingFilter
from ._admin_in_flight import (
    AlterInFlightResult,
    ExtensionUnavailable,
    FailedKeyView,
    InFlightPartitionView,
    InFlightRange,
)
from ._admin_scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from ._security import SECURITY_CONFIG, librdkafka_security_config
from ._share_acks import AcknowledgeType
from ._share_fetch import AcquiredBatches
from .admin import (
    Admin,
    AsyncAdmin,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigSynonym,
    ListedGroup,
    LogDirDescription,
    LogDirPartition,
    NewTopic,
    PartitionDescription,
    ShareGroupDescription,
    ShareMemberDescription,
    TopicDescription,
)
from .errors import (
    AuthenticationException,
    ConfigException,
    CorruptRecordException,
    IllegalStateException,
    KafkaConnectionError,
    KafkaException,
    KafkaTimeoutError,
    RecordDeserializationException,
    SaslAuthenticationException,
    SslAuthenticationException,
    WakeupException,
)

#: the client config keys of security (security.protocol, ssl.*, sasl.*; docs/security.md)
SECURITY_KEYS = tuple(SECURITY_CONFIG)
from .reader import AsyncPartitionReader, PartitionReader
from .records import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Record, TopicPartition
from .share_consumer import AsyncShareConsumer, ShareConsumer

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AcknowledgeType",
    "AcquiredBatches",
    "Admin",
    "AlterInFlightResult",
    "ExtensionUnavailable",
    "FailedKeyView",
    "InFlightPartitionView",
    "InFlightRange",
    "AsyncAdmin",
    "AsyncPartitionReader",
    "AsyncShareConsumer",
    "AuthenticationException",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigSynonym",
    "ConfigException",
    "CorruptRecordException",
    "IllegalStateException",
    "KafkaConnectionError",
    "KafkaException",
    "KafkaTimeoutError",
    "ListedGroup",
    "LogDirDescription",
    "LogDirPartition",
    "NewTopic",
    "PartitionDescription",
    "PartitionReader",
    "Record",
    "RecordDeserializationException",
    "SECURITY_KEYS",
    "SaslAuthenticationException",
    "ScramCredentialInfo",
    "ScramMechanism",
    "ShareGroupDescription",
    "ShareConsumer",
    "ShareMemberDescription",
    "SslAuthenticationException",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TopicDescription",
    "TopicPartition",
    "UserScramCredentialAlteration",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
    "WakeupException",
    "coordinator_records",
    "librdkafka_security_config",
]
