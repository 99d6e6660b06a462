"""Frame generation for tools/fuzz.py: request values, mutations, and what the broker should do.

`CaseFactory` turns one seeded `random.Random` into a stream of `Case`s. Each case is the bytes to
write on a connection and the reaction expected of the broker, derived with quafka's own request
decoder (`quafka.protocol.framing.decode_request`, the one the broker runs): a frame it can decode
must be answered (or refused by a logged close), one it cannot decode must close the connection.
Requests that would harm the canary or grow the broker without bound (broker-wide config changes,
deleting the fuzz topic, creating huge topics) are "defused": not sent, and counted.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from quafka.protocol.errors import ProtocolError
from quafka.protocol.fallback import fallback_entity_reader
from quafka.protocol.framing import decode_request
from quafka.protocol.record_batch import build_batch

DEFAULT_FRAMES = 100_000
FUZZ_TOPIC = "fuzz-topic"
FUZZ_PARTITIONS = 3
FUZZ_GROUP = "fuzz-share-group"
SESSION_GROUP = "fuzz-session-group"   # only the stateful share sessions join it (they leave when done)
CANARY_TOPIC = "canary-topic"
CANARY_GROUP = "canary-share-group"
CLIENT_ID = "quafka-fuzz"
API_VERSIONS = 18
PRODUCE, FETCH, SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 0, 1, 76, 78, 79
CREATE_TOPICS, DELETE_TOPICS, ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 19, 20, 33, 37, 44
ALTER_CLIENT_QUOTAS = 49
RESOURCE_TOPIC, RESOURCE_GROUP = 2, 32
# fuzz-made names come from this small pool, so the number of topics and groups stays bounded
NAME_POOL = tuple(f"fz-{a}{b}" for a in "abcde" for b in "xyz")
TOPIC_CONFIG_KEYS = ("retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "cleanup.policy",
                     "max.message.bytes", "message.timestamp.type", "min.insync.replicas", "no.such.config")
GROUP_CONFIG_KEYS = ("share.auto.offset.reset", "share.record.lock.duration.ms", "share.delivery.count.limit",
                     "share.isolation.level", "share.session.timeout.ms", "share.heartbeat.interval.ms",
                     "share.renew.acknowledge.enable", "no.such.config")
MAX_CREATED_PARTITIONS = 16   # a decoded request that would create more is not sent ("defused")

# what a case expects of the broker
REPLY = "reply"        # a response with the request's correlation id (or a logged close)
CLOSE = "close"        # we half-close after writing; the broker must close (answers allowed)
ABANDON = "abandon"    # a long poll the broker may hold for long: we write it and hang up


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def request_header(key: int, version: int, correlation_id: int, flexible: bool,
                   client_id: str | None = CLIENT_ID) -> bytes:
    """Request header v1 (non-flexible) or v2 (flexible: an empty tag section)."""
    if client_id is None:
        head = struct.pack(">hhih", key, version, correlation_id, -1)
    else:
        raw = client_id.encode()
        head = struct.pack(">hhih", key, version, correlation_id, len(raw)) + raw
    return head + b"\x00" if flexible else head


class _MarkingBuffer(io.BytesIO):
    """Records where each write of kio's encoder starts: the boundaries of primitive fields."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[int] = []

    def write(self, data) -> int:  # type: ignore[override]
        self.marks.append(self.tell())
        return super().write(data)


def encode_body(body: Any) -> tuple[bytes, list[int]]:
    buf = _MarkingBuffer()
    entity_writer(type(body))(buf, body)
    return buf.getvalue(), buf.marks


def kio_versions(key: int) -> list[int]:
    name = api_key_map.get(key)
    return sorted(schema_name_map.get(name, {})) if name else []


def has_request_class(key: int, version: int) -> bool:
    try:
        load_request_schema(key, version)
        return True
    except (UnknownAPIKey, UnknownEntity):
        return False


def decode_response(key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response entity) of one response frame (no size prefix)."""
    if key == API_VERSIONS and not has_request_class(key, version):
        version = 0   # above what kio knows: only the v0-format UNSUPPORTED_VERSION reply can come back
    cls = load_response_schema(key, version)
    correlation_id = struct.unpack_from(">i", frame, 0)[0]

    def read(entity_cls: type, pos: int) -> tuple[Any, int]:
        try:
            return entity_reader(entity_cls)(frame, pos)
        except KeyError:  # unknown tagged field
            return fallback_entity_reader(entity_cls)(frame, pos)

    _, pos = read(cls.__header_schema__, 0)
    if key == API_VERSIONS and len(frame) >= pos + 2 and struct.unpack_from(">h", frame, pos)[0] == 35:
        cls = load_response_schema(API_VERSIONS, 0)  # the v0-format UNSUPPORTED_VERSION reply
    body, _ = read(cls, pos)
    return correlation_id, body


# ----------------------------------------------------------------------------- request values


@dataclass
class World:
    """What the fuzz requests point at."""

    advertised: dict[int, tuple[int, int]]
    fuzz_topic_id: uuid.UUID
    canary_topic_id: uuid.UUID
    max_request_bytes: int


_INT_RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
               "int64": (-(2**63), 2**63 - 1), "uint16": (0, 2**16 - 1)}
_ODD_STRINGS = ("", ".", "..", "a" * 249, "fz-" + "w" * 300, "fz/../x", "fz-\u00e9\u2603", "fz\x00x", "fz x", "-1")


class ValueMaker:
    """Builds kio request entities. sane=True: a request the broker should serve, pointed at the fuzz
    topic and the fuzz share group, non-destructive (validate_only where it matters); sane=False:
    every field random within its wire type, lengths and partition counts kept small."""

    def __init__(self, rng: random.Random, world: World, sane: bool) -> None:
        self.rng = rng
        self.world = world
        self.sane = sane

    def entity(self, cls: type, api_key: int) -> Any:
        values = {}
        for f in dataclasses.fields(cls):
            if get_field_tag(f) is not None:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    values[f.name] = get_tagged_field_default(f)
                continue
            values[f.name] = self.field_value(f, api_key)
        return cls(**values)

    def field_value(self, f: dataclasses.Field, api_key: int) -> Any:
        shape = classify_field(f)
        kind = None if isinstance(shape, (EntityField, EntityTupleField)) else get_schema_field_type(f)
        optional = is_optional(f)
        if self.sane:
            value = self.sane_value(api_key, f.name, kind, shape, optional)
            if value is not _GENERIC:
                return value
        elif optional and self.rng.random() < 0.1:
            return None
        if isinstance(shape, EntityField):
            return self.entity(shape.type_, api_key)
        if isinstance(shape, EntityTupleField):
            return tuple(self.entity(shape.type_, api_key) for _ in range(self.length()))
        if isinstance(shape, PrimitiveTupleField):
            return tuple(self.primitive(kind, f.name, api_key) for _ in range(self.length()))
        return self.primitive(kind, f.name, api_key)

    def length(self) -> int:
        if self.sane:
            return 1
        return self.rng.choice((0, 1, 1, 1, 2, 3, self.rng.randint(4, 9)))

    def sane_value(self, api: int, name: str, kind: str | None, shape: Any, optional: bool) -> Any:
        rng = self.rng
        ms = datetime.timedelta
        if name == "max_wait":
            return ms(milliseconds=rng.choice((0, 0, 5, 50)))
        if name == "timeout":
            return ms(milliseconds=5000)
        if name == "transaction_timeout":
            return ms(milliseconds=60_000)
        fixed = {"replica_id": -1, "replica_epoch": -1, "min_bytes": 1, "max_bytes": 1 << 20,
                 "partition_max_bytes": 1 << 18, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                 "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1,
                 "validate_only": True, "key_type": 0, "producer_id": -1,
                 "producer_epoch": -1, "allow_auto_topic_creation": False, "forgotten_topics_data": (), "enable2_pc": False,
                 "keep_prepared_txn": False, "is_renew_ack": False, "member_epoch": 0, "endpoint_type": 1,
                 "client_software_name": "quafka-fuzz", "client_software_version": "1.0",
                 "states_filter": (), "types_filter": (), "acknowledgement_batches": (), "broker_ids": (1,),
                 "include_synonyms": False, "include_documentation": False, "include_authorized_operations": False,
                 "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
                 "include_fenced_brokers": False}
        if name in fixed:
            return fixed[name]
        if name in ("transactional_id", "cluster_id", "rack_id", "configuration_keys"):
            return None if optional else ("" if kind == "string" else ())
        if name in ("partition", "partition_index", "index"):
            return rng.randrange(FUZZ_PARTITIONS)
        if name == "partitions" and kind == "int32":  # arrays of partition numbers
            return tuple(range(rng.randint(1, FUZZ_PARTITIONS)))
        if name == "fetch_offset":
            return rng.choice((0, 0, 1, 5, 50))
        if name == "timestamp":
            return rng.choice((-1, -2, -3, 0, int(time.time() * 1000)))
        if name == "acks":
            return rng.choice((-1, 1))
        if name == "num_partitions":
            return rng.choice((1, 2, -1))
        if name == "replication_factor":
            return rng.choice((1, -1))
        if name == "count":
            return rng.randint(1, 4)
        if name == "offset":                      # DeleteRecords: trims the fuzz topic's head a little
            return rng.choice((0, 1, 2))
        if name == "start_offset":                # AlterShareGroupOffsets
            return rng.choice((0, 1, 10, -1))
        if name == "records":
            return self.batch()
        if name == "topic_id":
            return None if api == DELETE_TOPICS else self.world.fuzz_topic_id
        if name in ("key", "group_id"):
            return FUZZ_GROUP
        if name in ("coordinator_keys", "group_ids"):
            return (FUZZ_GROUP,)
        if name == "groups_names":
            return (rng.choice(NAME_POOL),)
        if name == "member_id":
            return str(uuid.UUID(int=rng.getrandbits(128)))
        if name == "share_session_epoch":
            return rng.choice((0, -1))
        if name == "share_acquire_mode":
            return rng.choice((0, 1))
        if name in ("max_records", "batch_size"):
            return rng.choice((1, 10, 100, 500))
        if name == "subscribed_topic_names":
            return (FUZZ_TOPIC,)
        if name == "config_operation":
            return rng.choice((0, 1))
        if name == "resource_type":
            return RESOURCE_TOPIC if api == 32 else rng.choice((RESOURCE_TOPIC, RESOURCE_GROUP))
        if name == "resource_name":
            return FUZZ_TOPIC if api == 32 else rng.choice(NAME_POOL)
        if name == "assignments":
            return () if api == CREATE_TOPICS else None
        if name == "configs" and api == CREATE_TOPICS:
            return ()
        if name == "value" and api != ALTER_CLIENT_QUOTAS:  # a config value (a quota's value is a float64)
            return rng.choice(("1", "100000", "delete", "earliest", "latest", "-1", "bogus"))
        if name in ("name", "topic", "topic_name", "topic_names"):
            if api == ALTER_CONFIGS or api == INCREMENTAL_ALTER_CONFIGS:      # a config key
                value = rng.choice(TOPIC_CONFIG_KEYS + GROUP_CONFIG_KEYS)
            elif api in (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS):
                value = rng.choice(NAME_POOL)
            else:
                value = FUZZ_TOPIC
            return (value,) if isinstance(shape, PrimitiveTupleField) else value
        return _GENERIC

    def primitive(self, kind: str, name: str, api: int) -> Any:
        rng = self.rng
        if kind in _INT_RANGES:
            lo, hi = _INT_RANGES[kind]
            if name in ("num_partitions", "count", "replication_factor"):
                return rng.choice((-1, 0, 1, 2, 3, lo, hi))
            r = rng.random()
            if r < 0.45:
                return max(lo, rng.choice((-1, 0, 1, 2, 3)))
            if r < 0.65:
                return rng.choice((lo, hi, lo + 1, hi - 1))
            return rng.randint(max(lo, -1000), min(hi, 1_000_000))
        if kind == "bool":
            return rng.random() < 0.5
        if kind in ("string", "bytes"):
            r = rng.random()
            if r < 0.3:
                text = FUZZ_TOPIC if rng.random() < 0.5 else FUZZ_GROUP
            elif r < 0.85:
                text = rng.choice(NAME_POOL)
            else:
                text = rng.choice(_ODD_STRINGS)
            return text if kind == "string" else text.encode()
        if kind == "records":
            return self.random_records()
        if kind == "uuid":
            return rng.choice((None, self.world.fuzz_topic_id, uuid.UUID(int=rng.getrandbits(128))))
        if kind in ("timedelta_i32", "timedelta_i64"):
            millis = rng.choice((0, 0, 1, 10, 50, -1, 500, 2**31 - 1)) if rng.random() < 0.9 else rng.randint(-1000, 5000)
            return datetime.timedelta(milliseconds=millis)
        if kind == "datetime_i64":
            return datetime.datetime.fromtimestamp(rng.randint(0, 2_000_000_000), datetime.timezone.utc)
        if kind == "error_code":
            return rng.choice(list(ErrorCode))
        if kind == "float64":
            return rng.random()
        raise ValueError(f"no generator for kafka type {kind} ({name})")

    def batch(self) -> bytes:
        rng = self.rng
        return build_batch([(b"k%d" % i, rng.randbytes(rng.randint(0, 60))) for i in range(rng.randint(1, 5))],
                           base_timestamp=int(time.time() * 1000))

    def random_records(self) -> bytes | None:
        rng = self.rng
        good = build_batch([(b"k%d" % i, rng.randbytes(rng.randint(0, 40))) for i in range(rng.randint(1, 4))],
                           producer_id=rng.choice((-1, -1, 0, 5, 2**63 - 1)), producer_epoch=rng.choice((-1, 0, 1)),
                           base_sequence=rng.choice((-1, 0, 7)),
                           attributes=rng.choice((0, 0, 0, 1, 4, 7, 0x08, 0x10, 0x20, 0x40)))
        choice = rng.randrange(9)
        if choice == 0:
            return None
        if choice == 1:
            return b""
        if choice == 2:
            return rng.randbytes(rng.randint(1, 120))
        if choice == 3:
            buf = bytearray(good)
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
            return bytes(buf)
        if choice == 4:
            return good + good
        if choice == 5:
            return good[: rng.randrange(len(good))]
        if choice == 6:
            buf = bytearray(good)
            struct.pack_into(">i", buf, 8, rng.choice((-1, 0, 48, 2**31 - 1)))  # batch length
            return bytes(buf)
        return good


_GENERIC = object()


# ----------------------------------------------------------------------------- cases


@dataclass(slots=True)
class Case:
    kind: str
    wire: bytes                   # exactly what is written (size prefixes included)
    expect: str                   # REPLY | CLOSE | ABANDON
    frames: int = 1               # request frames this case counts for
    request: bytes = b""          # REPLY: the frame whose answer we wait for (no size prefix)
    hold_s: float = 0.0           # REPLY: how long the broker may legitimately hold it (long polls)
    strict: bool = False          # CLOSE: a response would mean an undecodable frame was served

    def describe(self) -> str:
        return f"{self.kind} ({self.expect}) {self.wire.hex()}"


@dataclass
class Findings:
    """What the run found; everything that makes the run fail lands in `failures`."""

    failures: list[str] = field(default_factory=list)
    decoder_bugs: list[str] = field(default_factory=list)
    bad_responses: list[str] = field(default_factory=list)
    stalled: list[str] = field(default_factory=list)
    served_undecodable: list[str] = field(default_factory=list)
    internal_error_frames: list[str] = field(default_factory=list)


class CaseFactory:
    """Generates cases for one connection; everything random comes from one seeded Random."""

    WEIGHTS = {
        "valid": 90, "random_struct": 110, "flip": 200, "field": 200, "truncated": 60, "appended": 30,
        "version_swap": 40, "key_swap": 20, "unknown_tags": 40, "size_lie": 45, "random_frame": 40,
        "random_stream": 15, "unadvertised": 30, "produce_silent": 8, "share_session": 30,
    }

    def __init__(self, rng: random.Random, world: World, findings: Findings, long_poll_cap_s: float) -> None:
        self.rng = rng
        self.world = world
        self.findings = findings
        self.long_poll_cap_s = long_poll_cap_s
        self.sane = ValueMaker(rng, world, sane=True)
        self.wild = ValueMaker(rng, world, sane=False)
        self.served = [(k, v) for k, (lo, hi) in sorted(world.advertised.items()) for v in range(lo, hi + 1)
                       if has_request_class(k, v)]
        self.unadvertised = [(k, v) for k in sorted(api_key_map) for v in kio_versions(k)
                             if k not in world.advertised
                             or not world.advertised[k][0] <= v <= world.advertised[k][1]]
        kinds = list(self.WEIGHTS)
        self._kinds, self._weights = kinds, [self.WEIGHTS[k] for k in kinds]
        self.defused = 0
        self._pool: dict[tuple[int, int], tuple[bytes, list[int], int]] = {}

    # ------------------------------------------------------------------ helpers
    def cid(self) -> int:
        return self.rng.randint(0, 2**31 - 1)

    def encode(self, body: Any, client_id: str | None = CLIENT_ID) -> tuple[bytes, list[int], int]:
        """(frame, field boundaries, header length) of a kio request entity."""
        cls = type(body)
        header = request_header(cls.__api_key__, cls.__version__, self.cid(), cls.__flexible__, client_id)
        data, marks = encode_body(body)
        return header + data, [len(header) + m for m in marks], len(header)

    def valid_frame(self, key: int | None = None, version: int | None = None) -> tuple[bytes, list[int], int]:
        """A sane request (fresh values, fresh correlation id)."""
        if key is None:
            key, version = self.rng.choice(self.served)
        body = self.sane.entity(load_request_schema(key, version), key)
        return self.encode(body)

    def wild_frame(self) -> tuple[bytes, list[int], int]:
        key, version = self.rng.choice(self.served)
        body = self.wild.entity(load_request_schema(key, version), key)
        try:
            return self.encode(body, client_id=self.rng.choice((CLIENT_ID, None, "", "\u2603" * 3)))
        except Exception:  # a value kio cannot encode (out of range for its wire type)
            return self.valid_frame(key, version)

    def base_frame(self) -> tuple[bytes, list[int], int]:
        return self.valid_frame() if self.rng.random() < 0.6 else self.wild_frame()

    def expect(self, kind: str, frame: bytes, *, honest_size: bool = True) -> Case | None:
        """The case for one frame whose size prefix is honest; None when it must not be sent."""
        world = self.world
        wire = sized(frame)
        if len(frame) < 8 or len(frame) > world.max_request_bytes:
            return Case(kind, wire, CLOSE, strict=True)
        key, version = struct.unpack_from(">hh", frame)
        served = world.advertised.get(key)
        if served is None or not served[0] <= version <= served[1]:
            if key == API_VERSIONS and served is not None and version > served[1]:
                return Case(kind, wire, REPLY, request=frame)   # the v0 UNSUPPORTED_VERSION reply
            return Case(kind, wire, CLOSE, strict=True)
        try:
            _header, body = decode_request(frame)
        except ProtocolError:
            return Case(kind, wire, CLOSE, strict=True)
        except Exception as exc:  # quafka's decoder raised something else: a protocol-layer bug
            self.findings.decoder_bugs.append(f"decode_request raised {exc!r} on frame {frame.hex()}")
            return Case(kind, wire, CLOSE)
        if self.destructive(key, body, frame):
            self.defused += 1
            return None
        hold = 0.0
        if key in (FETCH, SHARE_FETCH):
            hold = max(0.0, body.max_wait.total_seconds())
            if hold > self.long_poll_cap_s:
                return Case(kind, wire, ABANDON)
        if key == PRODUCE and body.acks == 0:  # no response: an ApiVersions request right after it is answered
            sentinel = request_header(API_VERSIONS, 0, self.cid(), False)
            return Case(kind, wire + sized(sentinel), REPLY, frames=2, request=sentinel)
        return Case(kind, wire, REPLY, request=frame, hold_s=hold)

    def destructive(self, key: int, body: Any, frame: bytes) -> bool:
        """Requests that would harm the canary, the fuzz topic, or make the run unbounded."""
        if b"canary" in frame or self.world.canary_topic_id.bytes in frame:
            return True
        validate_only = getattr(body, "validate_only", False)
        if key == CREATE_TOPICS and not validate_only:
            return any(t.num_partitions > MAX_CREATED_PARTITIONS or len(t.assignments or ()) > MAX_CREATED_PARTITIONS
                       for t in body.topics)
        if key == CREATE_PARTITIONS and not validate_only:
            return any(t.count > MAX_CREATED_PARTITIONS for t in body.topics)
        if key == DELETE_TOPICS:
            names = [getattr(t, "name", None) for t in (getattr(body, "topics", None) or ())]
            names += list(getattr(body, "topic_names", None) or ())
            ids = [getattr(t, "topic_id", None) for t in (getattr(body, "topics", None) or ())]
            return FUZZ_TOPIC in names or self.world.fuzz_topic_id in ids
        if key in (ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS) and not validate_only:
            # broker-wide (4), logger (8) and client-metrics (16) resources would affect the canary
            return any(r.resource_type not in (RESOURCE_TOPIC, RESOURCE_GROUP) for r in body.resources)
        return False

    # ------------------------------------------------------------------ generators
    def next_kind(self) -> str:
        return self.rng.choices(self._kinds, self._weights)[0]

    def make(self, kind: str) -> Case | None:
        return getattr(self, "gen_" + kind)()

    def gen_valid(self) -> Case | None:
        return self.expect("valid", self.valid_frame()[0])

    def gen_random_struct(self) -> Case | None:
        return self.expect("random_struct", self.wild_frame()[0])

    def gen_flip(self) -> Case | None:
        rng = self.rng
        buf = bytearray(self.base_frame()[0])
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 5, 8))):
            op = rng.randrange(7)
            pos = rng.randrange(len(buf))
            if op == 0:
                buf[pos] ^= 1 << rng.randrange(8)
            elif op == 1:
                buf[pos] = rng.randrange(256)
            elif op == 2:
                buf[pos] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE))
            elif op == 3:
                buf[pos:pos] = rng.randbytes(rng.randint(1, 4))
            elif op == 4 and len(buf) > 9:
                del buf[pos:pos + rng.randint(1, 4)]
            elif op == 5:
                end = min(len(buf), pos + rng.randint(2, 16))
                buf[pos:pos] = buf[pos:end]                   # duplicate a slice
            else:
                value = rng.choice((-1, 0, 2**31 - 1, -(2**31), 0x7FFF, 0xFFFF, 0x10000))
                buf[pos:pos + 4] = struct.pack(">i", value)[: len(buf) - pos]
        return self.expect("flip", bytes(buf))

    _FIELD_PATTERNS = (
        b"\xff\xff", b"\x7f\xff", b"\x80\x00", b"\x00\x00",                          # int16 / legacy lengths
        b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x00", b"\x00\x01\x00\x00",
        b"\xff" * 8, b"\x7f" + b"\xff" * 7, b"\x80" + b"\x00" * 7,                    # int64
        b"\x00", b"\x01", b"\x02",                                                      # compact null / empty / one
        b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x80\x01",  # huge / overlong varints
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x80" * 6, b"\xff",          # unterminated
        b"\xfe\xff\xff\xff\x07", b"\x81\x80\x80\x80\x00",
    )

    def gen_field(self) -> Case | None:
        """Set one encoded field (found through the encoder's write boundaries) to an edge value."""
        rng = self.rng
        frame, marks, header_len = self.base_frame()
        buf = bytearray(frame)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            pos = rng.choice(marks) if marks and rng.random() < 0.9 else rng.randrange(header_len + 1)
            pattern = rng.choice(self._FIELD_PATTERNS)
            if rng.random() < 0.7:
                buf[pos:pos + len(pattern)] = pattern                # overwrite
            else:
                buf[pos:pos] = pattern                               # splice in
        return self.expect("field", bytes(buf))

    def gen_truncated(self) -> Case | None:
        frame = self.base_frame()[0]
        return self.expect("truncated", frame[: self.rng.randrange(len(frame))])

    def gen_appended(self) -> Case | None:
        frame = self.base_frame()[0]
        return self.expect("appended", frame + self.rng.randbytes(self.rng.choice((1, 3, 17, 200))))

    def gen_version_swap(self) -> Case | None:
        rng = self.rng
        frame = bytearray(self.base_frame()[0])
        key = struct.unpack_from(">h", frame)[0]
        known = kio_versions(key) or [0]
        version = rng.choice(known + [max(known) + 1, -1, 127, 32767, rng.randint(-32768, 32767)])
        struct.pack_into(">h", frame, 2, version)
        return self.expect("version_swap", bytes(frame))

    def gen_key_swap(self) -> Case | None:
        rng = self.rng
        frame = bytearray(self.base_frame()[0])
        key, version = rng.choice(self.served)
        struct.pack_into(">hh", frame, 0, key, version)
        return self.expect("key_swap", bytes(frame))

    def gen_unknown_tags(self) -> Case | None:
        """A flexible sane request with unknown tagged fields in its header and/or body tag section."""
        rng = self.rng
        flexible = [(k, v) for k, v in self.served if load_request_schema(k, v).__flexible__]
        key, version = rng.choice(flexible)
        frame, _marks, header_len = self.valid_frame(key, version)
        if frame[header_len - 1] != 0 or frame[-1] != 0:
            return self.expect("unknown_tags", frame)

        def section() -> bytes:
            tags = sorted(rng.sample((77, 999, 1000, 4096, 65535, 2**31 - 1), rng.randint(1, 3)))
            out = _uvarint(len(tags))
            for tag in tags:
                data = rng.randbytes(rng.choice((0, 1, 5, 130)))
                out += _uvarint(tag) + _uvarint(len(data)) + data
            return out

        where = rng.randrange(3)
        head = frame[: header_len - 1] + (section() if where != 1 else b"\x00")
        body = frame[header_len:-1] + (section() if where != 0 else b"\x00")
        return self.expect("unknown_tags", head + body)

    def gen_size_lie(self) -> Case:
        rng = self.rng
        frame = self.base_frame()[0]
        m = self.world.max_request_bytes
        choice = rng.randrange(4)
        if choice == 0:      # negative, tiny or huge
            size = rng.choice((-1, -(2**31), -rng.randint(2, 2**31 - 1), 0, 1, 7, m + 1, rng.randint(m + 1, 2**31 - 1)))
            return Case("size_lie", struct.pack(">i", size) + frame[: rng.choice((0, 4, 12, 40))], CLOSE, strict=True)
        if choice == 1:      # promises more than it sends, then hangs up
            size = rng.choice((len(frame) + 1, len(frame) + rng.randint(2, 1000), rng.randint(len(frame) + 1, m)))
            return Case("size_lie", struct.pack(">i", size) + frame, CLOSE, strict=True)
        if choice == 2:      # says less than the frame: the rest is read as the next frame
            size = rng.randint(8, max(8, len(frame) - 1))
            return Case("size_lie", struct.pack(">i", size) + frame, CLOSE)
        # the size prefix alone, in pieces
        return Case("size_lie", struct.pack(">i", len(frame))[: rng.randint(1, 3)], CLOSE, strict=True)

    def gen_random_frame(self) -> Case | None:
        rng = self.rng
        if rng.random() < 0.4:
            n = rng.choice((rng.randint(0, 7), rng.randint(8, 64), rng.randint(64, 600)))
            return self.expect("random_frame", rng.randbytes(n))
        key, version = rng.choice(self.served)
        head = request_header(key, version, self.cid(), rng.random() < 0.5)
        return self.expect("random_frame", head + rng.randbytes(rng.choice((0, 1, 4, 16, 64, 300))))

    def gen_random_stream(self) -> Case:
        return Case("random_stream", self.rng.randbytes(self.rng.randint(1, 400)), CLOSE)

    def gen_unadvertised(self) -> Case | None:
        rng = self.rng
        r = rng.random()
        if r < 0.35:   # the share-state APIs (Initialize/Read/Write/Delete/ReadSummary): kio knows them, we do not serve them
            key = rng.choice([k for k in (83, 84, 85, 86, 87) if kio_versions(k)])
            version = rng.choice(kio_versions(key))
        elif r < 0.7 and self.unadvertised:
            key, version = rng.choice(self.unadvertised)
        else:
            key = rng.choice((1000, 32767, -1, -32768, 9999, rng.randint(-32768, 32767)))
            while key in self.world.advertised:
                key = rng.randint(100, 32767)
            version = rng.choice((0, 1, 3, 127))
            return self.expect("unadvertised", request_header(key, version, self.cid(), False) + rng.randbytes(16))
        try:
            body = self.wild.entity(load_request_schema(key, version), key)
            data, _ = encode_body(body)
        except Exception:
            data = rng.randbytes(24)
        flexible = load_request_schema(key, version).__flexible__
        return self.expect("unadvertised", request_header(key, version, self.cid(), flexible) + data)

    def gen_produce_silent(self) -> Case | None:
        lo, hi = self.world.advertised[PRODUCE]
        version = self.rng.randint(lo, hi)
        body = self.sane.entity(load_request_schema(PRODUCE, version), PRODUCE)
        body = dataclasses.replace(body, acks=0)
        return self.expect("produce_silent", self.encode(body)[0])

    def gen_share_session(self) -> Case:
        return Case("share_session", b"", REPLY, frames=0)   # run by the worker (stateful)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
