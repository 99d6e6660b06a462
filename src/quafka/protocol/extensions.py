"""quafka's own APIs: in-flight inspection and force actions on share partitions (docs/protocol.md,
"quafka's API extension"). Kafka has nothing like them.

They travel as ordinary Kafka requests — size, request header v2, body; response header v1, body —
under API keys far outside Kafka's range (Kafka's keys are below 100), and the broker advertises
them in ApiVersions like every API it serves. Kafka clients skip API keys they do not know (Java's
NodeApiVersions keeps them apart as unknown APIs; librdkafka, kafka-python and aiokafka keep a map
of what the broker serves and look up only their own keys), so they never send them. A client of
quafka's (quafka.client.Admin) checks ApiVersions first and, against a broker that does not
advertise them (Apache Kafka), says that the feature needs a quafka broker.

The bodies use Kafka's flexible encoding (compact strings and arrays, tag sections), written as the
same kind of dataclasses that kio generates for Kafka's messages, so kio's readers and writers
encode and decode them, on the broker and in the client alike:

- `QuafkaDescribeInFlight` (key 32000) v0: a share group's in-flight windows — per share partition
  its start and end offsets, counts of records waiting (backoff, delivery time) and blocked (key
  ordering), rows of offset ranges (state, delivery count, holder with its client id and host, lock
  time left, due time, key), the failed keys; or, with `Offset`, the one row holding that offset.
- `QuafkaAlterInFlight` (key 32001) v0: a force action on one share partition — release a range
  (optionally resetting delivery counts), archive a range (to the DLQ when the group has one),
  or release a failed key; `ValidateOnly` answers what it would change and changes nothing.

Pure: dataclasses and tables, no I/O.
"""

# no `from __future__ import annotations`: kio reads the field types as objects

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

QUAFKA_DESCRIBE_IN_FLIGHT = 32000
QUAFKA_ALTER_IN_FLIGHT = 32001

# QuafkaAlterInFlight actions
ACTION_RELEASE, ACTION_ARCHIVE, ACTION_RELEASE_KEY = 0, 1, 2
ACTION_NAMES = {ACTION_RELEASE: "release", ACTION_ARCHIVE: "archive", ACTION_RELEASE_KEY: "release-key"}
# why an AVAILABLE range waits (rows' WaitReason)
WAIT_NONE, WAIT_BACKOFF, WAIT_DELIVERY = 0, 1, 2


# ----------------------------------------------------------------------------- QuafkaDescribeInFlight v0


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeInFlightTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_DESCRIBE_IN_FLIGHT)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partitions; empty: every partition of the topic the group has state for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QuafkaDescribeInFlightRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_DESCRIBE_IN_FLIGHT)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: str = field(metadata={"kafka_type": "string"})
    topics: tuple[DescribeInFlightTopic, ...] = ()
    """Empty: every share partition the group has state for."""
    offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """-1: the windows; an offset: only the row holding it ("where is my record")."""
    max_rows: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1000))
    """Most rows per share partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlightRow:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_DESCRIBE_IN_FLIGHT)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    first_offset: i64 = field(metadata={"kafka_type": "int64"})
    last_offset: i64 = field(metadata={"kafka_type": "int64"})
    state: i8 = field(metadata={"kafka_type": "int8"})
    """0 AVAILABLE, 1 ACQUIRED, 2 ACKNOWLEDGED, 3 ARCHIVING, 4 ARCHIVED."""
    delivery_count: i16 = field(metadata={"kafka_type": "int16"})
    member_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    client_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    client_host: str | None = field(metadata={"kafka_type": "string"}, default=None)
    lock_remaining_ms: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """ACQUIRED: the acquisition lock's time left; -1 otherwise."""
    due_at_ms: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """AVAILABLE and waiting: the epoch time it becomes deliverable; -1 otherwise."""
    wait_reason: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    """0 none, 1 redelivery backoff, 2 delivery time."""
    blocked: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """Key ordering: waiting behind an earlier record of its key (or its key is failed)."""
    pending: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """A state write in flight is deciding it."""
    key: bytes | None = field(metadata={"kafka_type": "bytes"}, default=None)
    """Key ordering: the key of a single keyed record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedKey:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_DESCRIBE_IN_FLIGHT)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    key: bytes = field(metadata={"kafka_type": "bytes"})
    failed_offset: i64 = field(metadata={"kafka_type": "int64"})
    waiting_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlightPartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_DESCRIBE_IN_FLIGHT)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: i16 = field(metadata={"kafka_type": "int16"}, default=i16(0))
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    start_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    end_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    log_start_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    log_end_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    in_flight_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    waiting_backoff_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    waiting_delivery_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    blocked_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    max_record_locks: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    key_ordering: bool = field(metadata={"kafka_type": "bool"}, default=False)
    truncated: bool = field(metadata={"kafka_type": "bool"}, default=False)
    dead_letter_topic: str | None = field(metadata={"kafka_type": "string"}, default=None)
    rows: tuple[InFlightRow, ...] = ()
    failed_keys: tuple[FailedKey, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlightTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_DESCRIBE_IN_FLIGHT)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_name: str = field(metadata={"kafka_type": "string"})
    error_code: i16 = field(metadata={"kafka_type": "int16"}, default=i16(0))
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    partitions: tuple[InFlightPartition, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class QuafkaDescribeInFlightResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_DESCRIBE_IN_FLIGHT)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time_ms: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    error_code: i16 = field(metadata={"kafka_type": "int16"}, default=i16(0))
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    topics: tuple[InFlightTopic, ...] = ()


# ----------------------------------------------------------------------------- QuafkaAlterInFlight v0


@dataclass(frozen=True, slots=True, kw_only=True)
class QuafkaAlterInFlightRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_ALTER_IN_FLIGHT)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    group_id: str = field(metadata={"kafka_type": "string"})
    topic_name: str = field(metadata={"kafka_type": "string"})
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    action: i8 = field(metadata={"kafka_type": "int8"})
    """0 release, 1 archive, 2 release a failed key."""
    first_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    last_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    reset_delivery_count: bool = field(metadata={"kafka_type": "bool"}, default=False)
    key: bytes | None = field(metadata={"kafka_type": "bytes"}, default=None)
    validate_only: bool = field(metadata={"kafka_type": "bool"}, default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuafkaAlterInFlightResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(QUAFKA_ALTER_IN_FLIGHT)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time_ms: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    error_code: i16 = field(metadata={"kafka_type": "int16"}, default=i16(0))
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    changed_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    """Records moved (or, with ValidateOnly, that would be)."""
    skipped_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    """Records in range left alone: settled, on their way to the DLQ, or decided by a write in flight."""
    not_fetched_count: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))
    """Offsets in range past the end offset (not fetched yet: nothing holds them)."""
    keys_released: i32 = field(metadata={"kafka_type": "int32"}, default=i32(0))


# ----------------------------------------------------------------------------- tables

EXTENSION_API_NAMES = {QUAFKA_DESCRIBE_IN_FLIGHT: "quafka_describe_in_flight",
                       QUAFKA_ALTER_IN_FLIGHT: "quafka_alter_in_flight"}
REQUESTS = {(QUAFKA_DESCRIBE_IN_FLIGHT, 0): QuafkaDescribeInFlightRequest,
            (QUAFKA_ALTER_IN_FLIGHT, 0): QuafkaAlterInFlightRequest}
RESPONSES = {(QUAFKA_DESCRIBE_IN_FLIGHT, 0): QuafkaDescribeInFlightResponse,
             (QUAFKA_ALTER_IN_FLIGHT, 0): QuafkaAlterInFlightResponse}
VERSION_RANGES = {QUAFKA_DESCRIBE_IN_FLIGHT: (0, 0), QUAFKA_ALTER_IN_FLIGHT: (0, 0)}
