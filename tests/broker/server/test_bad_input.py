"""Bad input never crashes or stalls the broker (architecture.md, Protocol; wire-notes §3-§5).

Acceptance: a bounded fuzz run (>= 10,000 generated frames: random bytes, truncated frames, absurd
sizes, unknown API keys, unadvertised versions, malformed bodies, unknown tagged fields) never
crashes or stalls the broker, while a well-behaved client on another connection keeps producing and
fetching throughout. A batch over message.max.bytes gets MESSAGE_TOO_LARGE; a Produce whose batch
CRC is corrupt gets CORRUPT_MESSAGE; in both cases the log end offset is unchanged.

The fuzz run is seeded: set QUAFKA_FUZZ_SEED to replay a run. The seed is printed when the test
starts and is part of every failure message.

What the broker must do with each frame (the oracle of the fuzz run):

- size prefix below 8 or above socket.request.max.bytes: close the connection, answer nothing;
- a (key, version) that was not advertised: close the connection, except ApiVersions above the
  served range, which gets the v0-format UNSUPPORTED_VERSION reply and keeps the connection;
- an advertised (key, version) that quafka's request decoder cannot decode: close the connection;
- one it can decode (unknown tagged fields and trailing bytes included): a response that kio decodes
  for that (key, version), exactly, with the request's correlation id. Two exceptions: Produce with
  acks=0 gets no response, and a Fetch may long-poll up to its MaxWaitMs. Valid requests (with or
  without unknown tagged fields, pipelined, or written a few bytes at a time) must be answered;
  a mutated or random one that happens to decode may instead be refused by a (logged) close;
- a frame cut short by the client closing its side: close, answer nothing;
- every close the broker initiates is logged with the peer and the key and version (or the size).

Any exception logged by the broker as an internal error (log.exception, level ERROR) fails the run.
The last section holds regression tests for the minimal frames the fuzz run found.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import logging
import os
import random
import re
import struct
import threading
import time
import typing
import uuid
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
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

from quafka.client._kio_overrides import RESPONSE_OVERRIDES
from quafka.protocol.errors import ProtocolError
from quafka.protocol.fallback import length_checker
from quafka.protocol.framing import decode_request
from quafka.protocol.record_batch import build_batch, iter_records

from support import RawClient, wait_until

GOOD_TOPIC = "good.client-topic"  # EntityMaker.name() can never produce this name
FUZZ_TOPIC = "fuzz-topic"
FUZZ_PARTITIONS = 3
CLIENT_ID = "quafka-fuzz"
FUZZ_FRAMES = 11_000
PHASES = 5
CONCURRENCY = 12
RESPONSE_TIMEOUT_S = 15.0  # a broker that neither answers nor closes within this is stalled
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
API_VERSIONS = 18

# -------------------------------------------------------------------------------------------
# encoding helpers
# -------------------------------------------------------------------------------------------


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def encode_entity(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def encode_request(body: Any, correlation_id: int, client_id: str | None = CLIENT_ID) -> bytes:
    """Request header (the version kio names for the class) + body, without the size prefix."""
    cls = type(body)
    header_cls = cls.__header_schema__
    values = dict(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                  correlation_id=correlation_id, client_id=client_id)
    header = header_cls(**{k: v for k, v in values.items() if k in header_cls.__dataclass_fields__})
    return encode_entity(header) + encode_entity(body)


def make(cls: type, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def item_class(cls: type, name: str) -> type:
    """The entity class of field `name` of `cls`: X for X, X | None, tuple[X, ...] and tuple[X, ...] | None."""
    tp = typing.get_type_hints(cls)[name]
    for _ in range(2):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) is tuple or (args and len(args) < len(typing.get_args(tp))):
            tp = args[0]
    return tp


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag_section(tags: list[tuple[int, bytes]]) -> bytes:
    out = uvarint(len(tags))
    for tag, data in sorted(tags):
        out += uvarint(tag) + uvarint(len(data)) + data
    return out


def with_unknown_tags(frame: bytes, header_tags: list[tuple[int, bytes]],
                      body_tags: list[tuple[int, bytes]]) -> bytes:
    """A flexible request frame (header v2, client_id CLIENT_ID, no tagged fields set) with unknown
    tagged fields added to the header's and the body's top-level tag sections."""
    header_end = 8 + 2 + len(CLIENT_ID.encode())  # key, version, correlation id, int16-length client id
    assert frame[header_end] == 0 and frame[-1] == 0, "expected empty tag sections"
    return (frame[:header_end] + tag_section(header_tags) + frame[header_end + 1:-1] + tag_section(body_tags))


def restamp(frame: bytes, correlation_id: int) -> bytes:
    return frame[:4] + struct.pack(">i", correlation_id) + frame[8:]


def legacy_message_set(value: bytes, magic: int = 1) -> bytes:
    """A one-message legacy (magic 0/1) message set, as clients before Kafka 0.11 sent them."""
    import zlib

    body = bytes([magic, 0])  # magic, attributes
    if magic == 1:
        body += struct.pack(">q", 1_700_000_000_000)
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value  # null key, value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


# -------------------------------------------------------------------------------------------
# request entities: sane ones (a valid request per advertised version) and random ones
# -------------------------------------------------------------------------------------------

INT_BOUNDS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63, "uint16": 16}
NAME_LETTERS = "fzqxjkw"  # fuzz-made names can never be GOOD_TOPIC


class EntityMaker:
    """Builds kio request entities. sane=True: a valid request against FUZZ_TOPIC that cannot
    destroy anything (validate_only where it matters, absent topics for deletes); sane=False:
    every field random within its wire type, with destructive sizes kept small."""

    def __init__(self, rng: random.Random, fuzz_topic_id: uuid.UUID, sane: bool) -> None:
        self.rng = rng
        self.sane = sane
        self.fuzz_topic_id = fuzz_topic_id
        batch = build_batch([(b"k", b"fuzz-value-" * 4), (None, b"second")])
        ms = datetime.timedelta
        self.global_sane: dict[str, Any] = {
            "replica_id": -1, "max_wait": ms(0), "min_bytes": 1, "max_bytes": 1 << 20,
            "partition_max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1, "fetch_offset": 0,
            "timestamp": -1, "acks": 1, "timeout": ms(milliseconds=5000), "transactional_id": None,
            "num_partitions": 1, "replication_factor": 1, "validate_only": True, "resource_type": 2,
            "key_type": 0, "key": "fuzz-group", "coordinator_keys": ("fuzz-group",), "producer_id": -1,
            "producer_epoch": -1, "transaction_timeout": ms(milliseconds=60_000),
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
            "include_cluster_authorized_operations": False, "include_fenced_brokers": False,
            "include_synonyms": False, "include_documentation": False, "endpoint_type": 1,
            "config_operation": 0, "offset": 0, "partition": 0, "partition_index": 0, "index": 0,
            "records": batch, "rack_id": "", "cluster_id": None, "client_software_name": "quafka-fuzz",
            "client_software_version": "1.0", "topic_id": None, "configuration_keys": None,
            "forgotten_topics_data": (), "enable2_pc": False, "keep_prepared_txn": False,
        }
        self.api_sane: dict[int, dict[str, Any]] = {
            0: {"name": FUZZ_TOPIC, "topic_id": fuzz_topic_id},
            1: {"topic": FUZZ_TOPIC, "topic_id": fuzz_topic_id},
            2: {"name": FUZZ_TOPIC},
            3: {"name": FUZZ_TOPIC},
            19: {"name": "fz-new", "assignments": (), "configs": ()},
            20: {"topic_names": ("fz-absent",), "name": "fz-absent"},
            21: {"name": FUZZ_TOPIC},
            32: {"resource_name": FUZZ_TOPIC},
            33: {"resource_name": "fz-absent", "configs": ()},
            37: {"name": "fz-absent", "count": 2, "assignments": None},
            44: {"resource_name": "fz-absent", "configs": ()},
            # the transaction APIs: a transactional id no producer has (nothing is written)
            24: {"transactional_id": "fz-txn", "name": FUZZ_TOPIC},
            25: {"transactional_id": "fz-txn"},
            26: {"transactional_id": "fz-txn"},
            27: {"name": "fz-absent"},
            28: {"transactional_id": "fz-txn", "name": FUZZ_TOPIC},
        }

    # ---------------------------------------------------------------- whole entities
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
        if self.sane:
            overrides = self.api_sane.get(api_key, {})
            if f.name in overrides:
                return overrides[f.name]
            if f.name in self.global_sane:
                return self.global_sane[f.name]
        optional = is_optional(f)
        if not self.sane and optional and self.rng.random() < 0.12:
            return None
        shape = classify_field(f)
        if isinstance(shape, EntityField):
            return self.entity(shape.type_, api_key)
        if isinstance(shape, EntityTupleField):
            return tuple(self.entity(shape.type_, api_key) for _ in range(self.length()))
        kind = get_schema_field_type(f)
        if isinstance(shape, PrimitiveTupleField):
            return tuple(self.primitive(kind, f.name, False) for _ in range(self.length()))
        return self.primitive(kind, f.name, optional)

    def length(self) -> int:
        if self.sane:
            return 1
        return self.rng.choice((0, 1, 1, 1, 2, 3, self.rng.randint(4, 12)))

    # ---------------------------------------------------------------- primitives
    def primitive(self, kind: str, name: str, optional: bool) -> Any:
        rng = self.rng
        if kind in INT_BOUNDS:
            bits = INT_BOUNDS[kind]
            lo, hi = (0, (1 << bits) - 1) if kind.startswith("u") else (-(1 << bits), (1 << bits) - 1)
            if self.sane:
                return 0
            if name in ("num_partitions", "count", "replication_factor"):
                return rng.choice((-1, 0, 1, 2, 3, lo, hi))  # never thousands of partitions
            r = rng.random()
            if r < 0.45:
                return max(lo, rng.choice((-1, 0, 1, 2, 3)))
            if r < 0.65:
                return rng.choice((lo, hi, lo + 1, hi - 1))
            return rng.randint(max(lo, -1000), min(hi, 1_000_000))
        if kind == "bool":
            return False if self.sane else rng.random() < 0.5
        if kind in ("string", "bytes"):
            if self.sane:
                return "fz-absent" if kind == "string" else b"fz"
            s = self.name()
            return s if kind == "string" else s.encode()
        if kind == "records":
            return self.records()
        if kind == "uuid":
            if self.sane:
                return None
            return rng.choice((None, self.fuzz_topic_id, uuid.UUID(int=rng.getrandbits(128))))
        if kind in ("timedelta_i32", "timedelta_i64"):
            if self.sane:
                return datetime.timedelta(0)
            ms = rng.choice((0, 0, 1, 10, 50, -1, 500, 2**31 - 1)) if rng.random() < 0.9 else rng.randint(-1000, 5000)
            return datetime.timedelta(milliseconds=ms)
        if kind == "datetime_i64":
            return datetime.datetime.fromtimestamp(rng.randint(0, 2_000_000_000), datetime.timezone.utc)
        if kind == "error_code":
            return rng.choice(list(ErrorCode))
        if kind == "float64":
            return rng.random()
        raise AssertionError(f"no generator for kafka type {kind} ({name})")

    def name(self) -> str:
        rng = self.rng
        choice = rng.random()
        if choice < 0.25:
            return FUZZ_TOPIC
        if choice < 0.75:
            return "fz-" + "".join(rng.choice(NAME_LETTERS) for _ in range(rng.randint(1, 6)))
        return rng.choice(("", ".", "..", "a" * 250, "fz-" + "w" * 300, "fz/../x", "fz-\u00e9\u2603", "fz\x00x",
                           "fz x", "-1"))

    def records(self) -> bytes | None:
        rng = self.rng
        good = build_batch([(b"k%d" % i, bytes(rng.randbytes(rng.randint(0, 40)))) for i in range(rng.randint(1, 4))],
                           producer_id=rng.choice((-1, -1, 0, 5, 2**63 - 1)),
                           producer_epoch=rng.choice((-1, 0, 1)), base_sequence=rng.choice((-1, 0, 7)),
                           attributes=rng.choice((0, 0, 0, 1, 4, 7, 0x08, 0x10, 0x20, 0x40)))
        choice = rng.randrange(10)
        if choice == 0:
            return None
        if choice == 1:
            return b""
        if choice == 2:
            return bytes(rng.randbytes(rng.randint(1, 120)))
        if choice == 3:  # corrupt one byte
            buf = bytearray(good)
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
            return bytes(buf)
        if choice == 4:
            return good + good
        if choice == 5:
            return good[: rng.randrange(len(good))]
        if choice == 6:
            return legacy_message_set(b"legacy", magic=rng.choice((0, 1)))
        if choice == 7:  # absurd batch length
            buf = bytearray(good)
            struct.pack_into(">i", buf, 8, rng.choice((-1, 0, 48, 2**31 - 1, len(good))))
            return bytes(buf)
        return good


# -------------------------------------------------------------------------------------------
# the oracle and the cases
# -------------------------------------------------------------------------------------------

SERVED = "served"          # a kio-decodable response with the request's correlation id
FALLBACK = "fallback"      # the v0 UNSUPPORTED_VERSION ApiVersions reply
OPEN = "open"              # after the expected replies, the connection stays usable
CLOSED = "closed"          # after the expected replies, the broker closes (no more bytes)
DROP = "drop"              # the broker may legitimately hold the request (long poll): we hang up
EOF = "eof"                # we half-closed after writing: the broker must close


@dataclass(slots=True)
class Case:
    kind: str
    data: bytes
    replies: list[tuple[bytes, str]]  # (request frame, SERVED | FALLBACK), in order
    final: str
    frames: int = 1
    half_close: bool = False
    allow_extra: bool = False  # EOF: complete frames hidden in random bytes may be answered
    may_close: bool = False    # replies: a deliberate (logged) close instead is acceptable
    chunk: int = 0             # write in pieces of this many bytes (0: at once)
    # what the broker's log line must name when it closes the connection: "key K version V" or "size N"
    close_reason: str = ""

    def describe(self) -> str:
        head = self.data[:160].hex()
        more = "" if len(self.data) <= 160 else f"... ({len(self.data)} bytes)"
        return f"[{self.kind}] expected {[h for _, h in self.replies]} then {self.final}; bytes {head}{more}"


def close_reason(frame: bytes) -> str:
    """What the broker's closing log line names for this frame (size prefix = len(frame))."""
    if len(frame) < 8:
        return f"size {len(frame)}"
    key, version = struct.unpack_from(">hh", frame)
    return f"key {key} version {version}"


class Oracle:
    def __init__(self, advertised: dict[int, tuple[int, int]], max_request_bytes: int) -> None:
        self.advertised = advertised
        self.max_request_bytes = max_request_bytes
        self.oracle_errors: list[str] = []

    def expect(self, frame: bytes) -> tuple[str, str]:
        """(reply, then) for one size-prefixed frame whose prefix matches its length."""
        if len(frame) < 8 or len(frame) > self.max_request_bytes:
            return "", CLOSED
        key, version = struct.unpack_from(">hh", frame)
        served = self.advertised.get(key)
        if served is None or not served[0] <= version <= served[1]:
            if key == API_VERSIONS and served is not None and version > served[1]:
                return FALLBACK, OPEN
            return "", CLOSED
        try:
            _header, body = decode_request(frame)
        except ProtocolError:
            return "", CLOSED
        except Exception as exc:  # the decoder itself is broken: the broker will log an internal error
            self.oracle_errors.append(f"decode_request raised {exc!r} on {frame[:120].hex()}")
            return "", DROP
        if key == 1 and body.max_wait > datetime.timedelta(seconds=1):
            return "", DROP
        if key == 0 and body.acks == 0:
            return "silent", OPEN
        return SERVED, OPEN


class CaseFactory:
    """Generates the fuzz cases; everything random comes from one seeded Random."""

    def __init__(self, rng: random.Random, advertised: dict[int, tuple[int, int]], max_request_bytes: int,
                 fuzz_topic_id: uuid.UUID) -> None:
        self.rng = rng
        self.advertised = advertised
        self.max_request_bytes = max_request_bytes
        self.oracle = Oracle(advertised, max_request_bytes)
        self.random_maker = EntityMaker(rng, fuzz_topic_id, sane=False)
        sane = EntityMaker(rng, fuzz_topic_id, sane=True)
        self.served_versions = [(k, v) for k, (lo, hi) in sorted(advertised.items()) for v in range(lo, hi + 1)
                                if _has_class(k, v)]
        self.base: list[tuple[int, int, bytes]] = []
        for key, version in self.served_versions:
            body = sane.entity(load_request_schema(key, version), key)
            self.base.append((key, version, encode_request(body, 0)))
        self.flexible_base = [b for b in self.base if load_request_schema(b[0], b[1]).__flexible__]
        self.unadvertised_known = [(k, v) for k in sorted(api_key_map) for v in _kio_versions(k)
                                   if k not in advertised or not advertised[k][0] <= v <= advertised[k][1]]
        self.weights = {
            "random_bytes": 900, "random_header": 900, "random_stream": 400, "valid": 700, "truncated": 1300,
            "truncated_eof": 500, "flipped": 2000, "absurd_size": 450, "unfulfilled_size": 100,
            "unknown_key": 600, "unadvertised_version": 700, "api_versions_high": 350, "unknown_tags": 700,
            "random_struct": 1500, "pipelined": 120, "dribbled": 60,
        }

    # ---------------------------------------------------------------- helpers
    def cid(self) -> int:
        return self.rng.randint(-(2**31), 2**31 - 1)

    def base_frame(self, flexible: bool = False) -> bytes:
        key, version, frame = self.rng.choice(self.flexible_base if flexible else self.base)
        return restamp(frame, self.cid())

    def oracle_case(self, kind: str, frame: bytes, strict: bool = False) -> Case:
        """The case for one frame, expectations from the oracle. Unless `strict`, a frame that
        decodes may be refused by closing the connection, if the broker logs why."""
        reply, final = self.oracle.expect(frame)
        reason = close_reason(frame) if len(frame) <= self.max_request_bytes else f"size {len(frame)}"
        if reply == "silent":  # acks=0: no response; an ApiVersions request after it is answered first
            sentinel = self.sentinel()
            return Case(kind, sized(frame) + sized(sentinel), [(sentinel, SERVED)], OPEN, frames=2, may_close=True)
        return Case(kind, sized(frame), [(frame, reply)] if reply else [], final,
                    may_close=reply == SERVED and not strict, close_reason=reason)

    def sentinel(self) -> bytes:
        from kio.schema.api_versions.v0.request import ApiVersionsRequest

        return encode_request(ApiVersionsRequest(), self.cid())

    def header(self, key: int, version: int) -> bytes:
        """A request header v1, or v2 (an empty tag section) half of the time."""
        client = CLIENT_ID.encode()
        head = struct.pack(">hhih", key, version, self.cid(), len(client)) + client
        return head + b"\x00" if self.rng.random() < 0.5 else head

    def body_of(self, key: int) -> bytes:
        """A plausible body: one of the sane bodies for `key` (or any), else random bytes."""
        same = [f for k, _v, f in self.base if k == key]
        if same and self.rng.random() < 0.7:
            frame = self.rng.choice(same)
            return frame[10 + len(CLIENT_ID):]
        return bytes(self.rng.randbytes(self.rng.randint(0, 64)))

    # ---------------------------------------------------------------- generators
    def generate(self, count: int) -> list[Case]:
        kinds = list(self.weights)
        weights = [self.weights[k] for k in kinds]
        cases = [getattr(self, "gen_" + kind)() for kind in self.rng.choices(kinds, weights, k=count)]
        self.rng.shuffle(cases)
        return cases

    def gen_random_bytes(self) -> Case:
        n = self.rng.choice((self.rng.randint(0, 7), self.rng.randint(8, 64), self.rng.randint(64, 600)))
        return self.oracle_case("random_bytes", bytes(self.rng.randbytes(n)))

    def gen_random_header(self) -> Case:
        key, version = self.rng.choice(self.served_versions)
        tail = bytes(self.rng.randbytes(self.rng.choice((0, 1, 4, 16, 64, 300))))
        return self.oracle_case("random_header", self.header(key, version) + tail)

    def gen_random_stream(self) -> Case:
        data = bytes(self.rng.randbytes(self.rng.randint(1, 400)))
        return Case("random_stream", data, [], EOF, half_close=True, allow_extra=True)

    def gen_valid(self) -> Case:
        frame = self.base_frame()
        case = self.oracle_case("valid", frame, strict=True)
        assert case.replies and case.replies[0][1] == SERVED, f"a sane request is not served: {case.describe()}"
        return case

    def gen_truncated(self) -> Case:
        frame = self.base_frame()
        return self.oracle_case("truncated", frame[: self.rng.randrange(len(frame))])

    def gen_truncated_eof(self) -> Case:
        data = sized(self.base_frame())
        cut = self.rng.choice((self.rng.randint(1, 3), self.rng.randint(4, len(data) - 1)))
        return Case("truncated_eof", data[:cut], [], EOF, half_close=True)

    def gen_flipped(self) -> Case:
        buf = bytearray(self.base_frame())
        for _ in range(self.rng.choice((1, 1, 1, 2, 2, 3, 4, 8))):
            op = self.rng.randrange(6)
            pos = self.rng.randrange(len(buf))
            if op == 0:
                buf[pos] ^= 1 << self.rng.randrange(8)
            elif op == 1:
                buf[pos] = self.rng.randrange(256)
            elif op == 2:
                buf[pos] = self.rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE))
            elif op == 3:
                buf.insert(pos, self.rng.randrange(256))
            elif op == 4 and len(buf) > 8:
                del buf[pos]
            else:  # overwrite a 4-byte window with an extreme int32 (array lengths, sizes)
                value = self.rng.choice((-1, 0, 2**31 - 1, -(2**31), 0x7FFF, 0xFFFF))
                buf[pos:pos + 4] = struct.pack(">i", value)[: len(buf) - pos]
        return self.oracle_case("flipped", bytes(buf))

    def gen_absurd_size(self) -> Case:
        m = self.max_request_bytes
        size = self.rng.choice((-1, -(2**31), -self.rng.randint(2, 2**31 - 1), 0, 1, 3, 7, m + 1,
                                self.rng.randint(m + 1, 2**31 - 1), 2**31 - 1))
        tail = bytes(self.rng.randbytes(self.rng.choice((0, 4, 12, 40))))
        return Case("absurd_size", struct.pack(">i", size) + tail, [], CLOSED, close_reason=f"size {size}")

    def gen_unfulfilled_size(self) -> Case:
        """A legal size prefix, fewer bytes than it promises, then the client hangs up."""
        frame = self.base_frame()
        size = self.rng.choice((len(frame) + 1, self.rng.randint(len(frame) + 1, self.max_request_bytes),
                                self.max_request_bytes))
        return Case("unfulfilled_size", struct.pack(">i", size) + frame, [], EOF, half_close=True)

    def gen_unknown_key(self) -> Case:
        if self.rng.random() < 0.5:
            key, version = self.rng.choice(self.unadvertised_known)
            try:
                body = encode_entity(self.random_maker.entity(load_request_schema(key, version), key))
            except Exception:
                body = b""
            frame = self.header(key, version) + body
        else:
            key = self.rng.choice((1000, 67, 76, 78, 32767, -1, -32768, 9999, self.rng.randint(-32768, 32767)))
            while key in self.advertised:
                key = self.rng.randint(100, 32767)
            frame = self.header(key, self.rng.choice((0, 1, 3, 127))) + self.body_of(-1)
        return self.oracle_case("unknown_key", frame)

    def gen_unadvertised_version(self) -> Case:
        key = self.rng.choice(sorted(self.advertised))
        lo, hi = self.advertised[key]
        if key == API_VERSIONS:
            candidates = [-1, -32768, -2]
        else:
            candidates = [hi + 1, hi + 2, 99, 127, 32767, -1, -32768] + list(range(0, lo))
        frame = self.header(key, self.rng.choice(candidates)) + self.body_of(key)
        case = self.oracle_case("unadvertised_version", frame)
        assert case.final == CLOSED, case.describe()
        return case

    def gen_api_versions_high(self) -> Case:
        hi = self.advertised[API_VERSIONS][1]
        version = self.rng.choice((hi + 1, hi + 2, 127, 32767, self.rng.randint(hi + 1, 32767)))
        frame = self.header(API_VERSIONS, version) + self.body_of(API_VERSIONS)
        case = self.oracle_case("api_versions_high", frame)
        assert case.replies == [(frame, FALLBACK)], case.describe()
        return case

    def gen_unknown_tags(self) -> Case:
        frame = self.base_frame(flexible=True)

        def tags() -> list[tuple[int, bytes]]:
            chosen = self.rng.sample((100, 999, 1000, 4096, 65535, 2**31 - 1), self.rng.randint(1, 3))
            return [(t, bytes(self.rng.randbytes(self.rng.choice((0, 1, 5, 130))))) for t in chosen]

        where = self.rng.randrange(3)
        tagged = with_unknown_tags(frame, tags() if where != 1 else [], tags() if where != 0 else [])
        return Case("unknown_tags", sized(tagged), [(tagged, SERVED)], OPEN)

    def gen_random_struct(self) -> Case:
        key, version = self.rng.choice(self.served_versions)
        body = self.random_maker.entity(load_request_schema(key, version), key)
        return self.oracle_case("random_struct", encode_request(body, self.cid(),
                                                                client_id=self.rng.choice((CLIENT_ID, None, ""))))

    def gen_pipelined(self) -> Case:
        frames = [self.base_frame() for _ in range(self.rng.randint(1, 4))]
        bad = self.header(self.rng.choice((1000, -1)), 0) + b"\x00" * 8
        data = b"".join(sized(f) for f in frames) + sized(bad)
        return Case("pipelined", data, [(f, SERVED) for f in frames], CLOSED, frames=len(frames) + 1,
                    close_reason=close_reason(bad))

    def gen_dribbled(self) -> Case:
        frame = self.base_frame()
        return Case("dribbled", sized(frame), [(frame, SERVED)], OPEN, chunk=self.rng.randint(1, 7))


def _kio_versions(key: int) -> list[int]:
    from kio.schema.index import schema_name_map

    return sorted(schema_name_map[api_key_map[key]])


def _has_class(key: int, version: int) -> bool:
    try:
        load_request_schema(key, version)
        return True
    except (UnknownAPIKey, UnknownEntity):
        return False


# -------------------------------------------------------------------------------------------
# checking responses
# -------------------------------------------------------------------------------------------


def check_reply(request: bytes, response: bytes, how: str, advertised: dict[int, tuple[int, int]]) -> str | None:
    """None if `response` is the right reply to `request`, else what is wrong with it."""
    key, version, correlation_id = struct.unpack_from(">hhi", request)
    if len(response) < 4:
        return f"response of {len(response)} bytes"
    (echoed,) = struct.unpack_from(">i", response)
    if echoed != correlation_id:
        return f"response correlation id {echoed}, request had {correlation_id}"
    if how == FALLBACK:
        try:
            body, used = entity_reader(ApiVersionsResponseV0)(response, 4)
        except Exception as exc:
            return f"ApiVersions fallback reply does not decode as v0: {exc!r}"
        if body.error_code != ErrorCode.unsupported_version:
            return f"ApiVersions fallback reply has error {body.error_code!r}, expected UNSUPPORTED_VERSION (35)"
        ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        if ranges != advertised:
            return f"ApiVersions fallback reply lists {ranges}, advertised {advertised}"
        return None
    # the client's reading of a response kio reads differently (DescribeTransactions' start time -1)
    cls = RESPONSE_OVERRIDES.get((key, version)) or load_response_schema(key, version)
    try:
        _header, pos = entity_reader(cls.__header_schema__)(response, 0)
        length_checker(cls)(response, pos)  # never hand kio an implausible array length
        _body, used = entity_reader(cls)(response, pos)
    except Exception as exc:
        return f"response does not decode as {cls.__name__} v{version}: {exc!r}"
    if pos + used != len(response):
        return f"{cls.__name__} v{version} response has {len(response) - pos - used} undecoded trailing bytes"
    return None


def peer_named(message: str) -> str:
    found = re.search(r"127\.0\.0\.1:\d+", message)
    return found.group(0) if found else ""


class CaseFailure(Exception):
    pass


class FuzzRunner:
    def __init__(self, host: str, port: int, advertised: dict[int, tuple[int, int]], concurrency: int) -> None:
        self.host = host
        self.port = port
        self.advertised = advertised
        self.concurrency = concurrency
        self.failures: list[str] = []
        self.max_failures = 20
        self.outcomes: Counter[str] = Counter()
        self.frames_sent = 0
        self.cases_run = 0
        self.connections = 0
        self.closes: list[tuple[str, str, Case]] = []  # (our address, reason to be logged, case)
        self.cases_by_peer: dict[str, list[Case]] = {}

    async def run(self, cases: list[Case]) -> None:
        queue = deque(cases)
        await asyncio.gather(*(self._worker(queue) for _ in range(self.concurrency)))

    async def _worker(self, queue: deque) -> None:
        conn = None
        try:
            while queue and len(self.failures) < self.max_failures:
                case = queue.popleft()
                try:
                    conn = await self._run_case(case, conn)
                except (CaseFailure, OSError, asyncio.IncompleteReadError) as exc:
                    self.failures.append(f"{case.describe()}: {exc}")
                    conn = self._hang_up(conn)
                self.cases_run += 1
                self.frames_sent += case.frames
        finally:
            self._hang_up(conn)

    @staticmethod
    def _hang_up(conn) -> None:
        if conn is not None:
            conn[1].close()
        return None

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes | None:
        """One response frame; None when the broker closed the connection at a frame boundary."""
        try:
            head = await asyncio.wait_for(reader.readexactly(4), RESPONSE_TIMEOUT_S)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise CaseFailure(f"connection closed inside a response size prefix ({exc.partial.hex()})")
            return None
        except ConnectionResetError:
            return None
        except asyncio.TimeoutError:
            raise CaseFailure(f"the broker neither answered nor closed within {RESPONSE_TIMEOUT_S}s") from None
        (size,) = struct.unpack(">i", head)
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise CaseFailure(f"response size prefix {size}")
        try:
            return await asyncio.wait_for(reader.readexactly(size), RESPONSE_TIMEOUT_S)
        except asyncio.IncompleteReadError as exc:
            raise CaseFailure(f"connection closed after {len(exc.partial)} of {size} response bytes") from None
        except asyncio.TimeoutError:
            raise CaseFailure(f"response of {size} bytes did not complete within {RESPONSE_TIMEOUT_S}s") from None

    async def _run_case(self, case: Case, conn):
        if conn is None:
            conn = await asyncio.open_connection(self.host, self.port)
            self.connections += 1
        reader, writer = conn
        peer = "%s:%d" % writer.get_extra_info("sockname")[:2]
        self.cases_by_peer.setdefault(peer, []).append(case)
        try:
            if case.chunk:
                for i in range(0, len(case.data), case.chunk):
                    writer.write(case.data[i:i + case.chunk])
                    await writer.drain()
            else:
                writer.write(case.data)
                await writer.drain()
            if case.half_close:
                writer.write_eof()
        except ConnectionError:
            pass  # the broker may close before reading everything; the reads below tell
        for request, how in case.replies:
            response = await self._read_frame(reader)
            if response is None:
                if case.may_close:
                    self.outcomes[f"{case.kind}: refused"] += 1
                    if case.close_reason:
                        self.closes.append((peer, case.close_reason, case))
                    return self._hang_up(conn)
                raise CaseFailure("the broker closed the connection instead of answering")
            problem = check_reply(request, response, how, self.advertised)
            if problem:
                raise CaseFailure(problem)
        if case.final == OPEN:
            self.outcomes[f"{case.kind}: answered"] += 1
            return conn
        if case.final == DROP:
            self.outcomes[f"{case.kind}: dropped"] += 1
            return self._hang_up(conn)
        extra = 0
        while True:
            response = await self._read_frame(reader)
            if response is None:
                break
            extra += 1
            if case.final == CLOSED or not case.allow_extra or extra > 100:
                raise CaseFailure(f"expected the connection to close, got a {len(response)}-byte response "
                                  f"{response[:40].hex()}")
        self.outcomes[f"{case.kind}: closed" + (" after replies" if case.replies or extra else "")] += 1
        if case.final == CLOSED:
            self.closes.append((peer, case.close_reason, case))
        return self._hang_up(conn)

    def unlogged_closes(self, records: list[logging.LogRecord]) -> list[str]:
        """Closes the broker made without a log line naming the peer and the key and version (or size).
        An unserved API is warned once per client and API, its repeats logged at debug level
        (connection._log_unserved): those count too."""
        by_peer: dict[str, list[str]] = {}
        for r in records:
            if r.name.startswith("quafka") and (r.levelno == logging.WARNING or (
                    r.levelno == logging.DEBUG and r.name == "quafka.connection")):
                message = r.getMessage()
                peer = peer_named(message)
                if peer:
                    by_peer.setdefault(peer, []).append(message)
        missing = []
        for peer, reason, case in self.closes:
            messages = by_peer.get(peer, [])
            if not any(reason in m for m in messages):
                missing.append(f"{case.describe()}: closed; no log line names {peer} and '{reason}' "
                               f"(logged: {messages})")
        return missing


# -------------------------------------------------------------------------------------------
# the well-behaved client
# -------------------------------------------------------------------------------------------


class GoodClient(threading.Thread):
    """confluent-kafka Producer + Consumer on GOOD_TOPIC: produce one record, wait for its
    acknowledgement, read it back, repeat. `progress` counts completed round trips."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="good-client", daemon=True)
        self.bootstrap = bootstrap
        self.progress = 0
        self.values: list[bytes] = []
        self.offsets: list[int] = []
        self.read_back: list[tuple[int, bytes]] = []
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0,
                             "enable.idempotence": True, "message.timeout.ms": 30000})
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "good-client",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 20,
                             "enable.partition.eof": False})
        consumer.assign([TopicPartition(GOOD_TOPIC, 0, 0)])
        try:
            i = 0
            while not self._stop_event.is_set():
                value = b"good-%06d" % i
                results: list = []
                producer.produce(GOOD_TOPIC, value=value, partition=0,
                                 on_delivery=lambda err, msg: results.append((err, msg.offset())))
                if producer.flush(30) or not results:
                    raise AssertionError(f"good record {i} was not acknowledged within 30 s")
                err, offset = results[0]
                if err is not None:
                    raise AssertionError(f"good record {i} failed: {err}")
                self.values.append(value)
                self.offsets.append(offset)
                deadline = time.monotonic() + 30
                while len(self.read_back) <= i:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"good record {i} (offset {offset}) was not read back within 30 s")
                    for msg in consumer.consume(num_messages=100, timeout=0.1):
                        if msg.error() is not None:
                            raise AssertionError(f"good consumer error: {msg.error()}")
                        self.read_back.append((msg.offset(), msg.value()))
                i += 1
                self.progress = i
        finally:
            consumer.close()


# -------------------------------------------------------------------------------------------
# raw request helpers
# -------------------------------------------------------------------------------------------


def advertised_ranges(raw: RawClient) -> dict[int, tuple[int, int]]:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    resp = raw.request(ApiVersionsRequest(client_software_name="quafka-tests", client_software_version="1.0"))
    assert resp.error_code == ErrorCode.none
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def create_topic(raw: RawClient, name: str, partitions: int = 1) -> uuid.UUID:
    """Create a topic with CreateTopics v4 (as librdkafka sends it) and return its id (Metadata v12)."""
    from kio.schema.create_topics.v4.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    resp = raw.request(CreateTopicsRequest(
        topics=(CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                               configs=()),),
        timeout=datetime.timedelta(seconds=10), validate_only=False))
    assert resp.topics[0].error_code == ErrorCode.none, resp
    meta = raw.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=name),),
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert meta.topics[0].error_code == ErrorCode.none and meta.topics[0].topic_id is not None, meta
    return meta.topics[0].topic_id


def produce_request(topic: str, records: bytes, *, version: int = 9, partition: int = 0,
                    topic_id: uuid.UUID | None = None, acks: int = 1):
    cls = load_request_schema(0, version)
    topic_cls = item_class(cls, "topic_data")
    part_cls = item_class(topic_cls, "partition_data")
    return make(cls, transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
        make(topic_cls, name=topic, topic_id=topic_id,
             partition_data=(make(part_cls, index=partition, records=records),)),))


def produce_raw(raw: RawClient, topic: str, records: bytes, *, version: int = 9, partition: int = 0,
                topic_id: uuid.UUID | None = None):
    """Send one Produce (acks=1) and return the partition response."""
    resp = raw.request(produce_request(topic, records, version=version, partition=partition, topic_id=topic_id))
    assert len(resp.responses) == 1 and len(resp.responses[0].partition_responses) == 1, resp
    return resp.responses[0].partition_responses[0]


def log_end_offset(raw: RawClient, topic: str, partition: int = 0) -> int:
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

    resp = raw.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                                                       timestamp=-1),)),)))
    part = resp.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none, resp
    return part.offset


def fetch_values(raw: RawClient, topic: str, partition: int = 0, offset: int = 0) -> list[tuple[int, bytes | None]]:
    """Every record of the partition from `offset`, read with Fetch v12 (by topic name)."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    out: list[tuple[int, bytes | None]] = []
    end = log_end_offset(raw, topic, partition)
    while offset < end:
        resp = raw.request(FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 24, isolation_level=0,
            session_id=0, session_epoch=-1, topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 24),)),), forgotten_topics_data=(), rack_id=""))
        part = resp.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none, part
        data = part.records or b""
        assert data, f"fetch at {offset} below the end {end} returned nothing"
        pos = 0
        while pos + 12 <= len(data):
            size = struct.unpack_from(">i", data, pos + 8)[0] + 12
            if pos + size > len(data):
                break
            for rec in iter_records(data[pos:pos + size]):
                if rec.offset >= offset:
                    out.append((rec.offset, rec.value))
            pos += size
        offset = out[-1][0] + 1
    return out


def connection_closed(raw: RawClient, timeout_s: float = 10.0) -> bool:
    """True if the broker closed `raw`'s connection without sending anything more."""
    raw.sock.settimeout(timeout_s)
    try:
        return raw.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def internal_errors(caplog, cases_by_peer: dict[str, list] | None = None) -> list[str]:
    """ERROR records (internal errors), one per distinct exception site, with a count and, when
    known, the bytes the fuzz run had sent on that connection."""
    groups: dict[str, list[logging.LogRecord]] = {}
    for r in caplog.records:
        if r.levelno >= logging.ERROR:
            text = r.exc_text or ""
            lines = [ln for ln in text.splitlines() if ln.strip()]
            site = [ln for ln in lines if ln.strip().startswith("File ")][-1:] + lines[-1:]
            groups.setdefault(" | ".join(site) or r.getMessage(), []).append(r)
    out = []
    for site, records in groups.items():
        r = records[0]
        sent = ""
        if cases_by_peer:
            for case in cases_by_peer.get(peer_named(r.getMessage()), [])[-1:]:
                sent = f"\nlast case sent on that connection: {case.describe()}"
        out.append(f"{len(records)} x {r.name} {r.levelname}: {r.getMessage()}\n{r.exc_text or ''}{sent}")
    return out


# -------------------------------------------------------------------------------------------
# the fuzz run
# -------------------------------------------------------------------------------------------


@pytest.fixture
def fuzz_seed(capsys):
    env = os.environ.get("QUAFKA_FUZZ_SEED")
    seed = int(env) if env else random.SystemRandom().randrange(2**32)
    with capsys.disabled():  # visible even if the process dies
        print(f"\n[bad-input fuzz] seed {seed} (replay with QUAFKA_FUZZ_SEED={seed})")
    return seed


def test_fuzzed_frames_never_crash_or_stall_the_broker_while_a_good_client_makes_progress(broker, caplog, fuzz_seed):
    caplog.set_level(logging.WARNING, logger="quafka")
    # an unserved API is warned once per client and API, its repeats logged at debug level
    caplog.set_level(logging.DEBUG, logger="quafka.connection")
    seed_note = f"fuzz seed {fuzz_seed} (replay with QUAFKA_FUZZ_SEED={fuzz_seed})"
    try:
        _fuzz_run(broker, caplog, fuzz_seed, seed_note)
    except Exception as exc:
        if seed_note in str(exc):
            raise
        raise AssertionError(f"{seed_note}: {type(exc).__name__}: {exc}") from exc


def _fuzz_run(broker, caplog, fuzz_seed: int, seed_note: str) -> None:
    rng = random.Random(fuzz_seed)
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    max_request_bytes = int(broker.config.get("socket.request.max.bytes"))

    with RawClient(broker.bootstrap_servers) as raw:
        advertised = advertised_ranges(raw)
        create_topic(raw, GOOD_TOPIC)
        fuzz_topic_id = create_topic(raw, FUZZ_TOPIC, FUZZ_PARTITIONS)
        for p in range(FUZZ_PARTITIONS):
            assert produce_raw(raw, FUZZ_TOPIC, build_batch([(b"seed", b"x" * 100)] * 3), partition=p).error_code == 0

    factory = CaseFactory(rng, advertised, max_request_bytes, fuzz_topic_id)
    cases = factory.generate(FUZZ_FRAMES)
    filler_factory = CaseFactory(random.Random(fuzz_seed + 1), advertised, max_request_bytes, fuzz_topic_id)
    assert sum(c.frames for c in cases) >= 10_000

    good = GoodClient(broker.bootstrap_servers)
    good.start()
    runner = FuzzRunner(host, int(port), advertised, CONCURRENCY)
    phase_progress: list[tuple[int, int]] = []
    try:
        wait_until(lambda: good.progress >= 1 or good.error is not None, 30, message="the good client's first round trip")
        assert good.error is None, f"{seed_note}: good client failed before the fuzz run: {good.error!r}"

        async def fuzz() -> None:
            loop = asyncio.get_running_loop()
            size = -(-len(cases) // PHASES)
            for start in range(0, len(cases), size):
                before = good.progress
                await runner.run(cases[start:start + size])
                # The good client must complete a round trip while this phase's fuzz traffic flows:
                # keep fuzzing (fresh cases) until it has, or give up after a generous deadline.
                deadline = loop.time() + 60
                while good.progress == before and good.error is None and not runner.failures:
                    if loop.time() > deadline:
                        break
                    await runner.run(filler_factory.generate(4 * CONCURRENCY))
                phase_progress.append((before, good.progress))
                if runner.failures or good.error is not None:
                    return

        asyncio.run(fuzz())
    finally:
        good.stop()
        good.join(60)

    stats = "\n".join(f"  {k}: {v}" for k, v in sorted(runner.outcomes.items()))
    summary = (f"{seed_note}; {runner.cases_run} cases, {runner.frames_sent} frames on {runner.connections} "
               f"connections; good client round trips per phase {phase_progress}; outcomes:\n{stats}")
    print(summary)
    errors = internal_errors(caplog, runner.cases_by_peer)
    assert not errors, f"{summary}\nthe broker logged internal errors at {len(errors)} sites:\n" + "\n".join(errors)
    assert not factory.oracle.oracle_errors, f"{seed_note}: {factory.oracle.oracle_errors[:5]}"
    assert not runner.failures, f"{summary}\nfailures:\n" + "\n".join(runner.failures)
    assert runner.frames_sent >= 10_000, summary
    assert not good.is_alive(), f"{seed_note}: the good client did not stop"
    assert good.error is None, f"{seed_note}: the good client failed: {good.error!r}"
    stalled = [i for i, (before, after) in enumerate(phase_progress) if after <= before]
    assert len(phase_progress) >= PHASES and not stalled, (
        f"{seed_note}: the good client made no progress during fuzz phase(s) {stalled}: {phase_progress}")

    # every acknowledged record was read back, in order, at consecutive offsets
    n = len(good.values)
    assert good.offsets == list(range(n)), f"{seed_note}: acknowledged offsets {good.offsets[:20]}..."
    assert good.read_back[:n] == list(zip(good.offsets, good.values)), seed_note

    # afterwards the broker still answers on a new connection and the good topic is intact
    assert broker._thread is not None and broker._thread.is_alive(), f"{seed_note}: the broker thread died"
    with RawClient(broker.bootstrap_servers) as raw:
        assert advertised_ranges(raw) == advertised
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

        meta = raw.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=GOOD_TOPIC),),
                                           allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
        assert meta.topics[0].error_code == ErrorCode.none and len(meta.topics[0].partitions) == 1, meta
        assert log_end_offset(raw, GOOD_TOPIC) == n, seed_note
        assert fetch_values(raw, GOOD_TOPIC) == list(zip(range(n), good.values)), seed_note

    errors = internal_errors(caplog)
    assert not errors, f"{seed_note}: the broker logged internal errors:\n" + "\n".join(errors[:5])
    unlogged = runner.unlogged_closes(caplog.records)
    assert not unlogged, f"{seed_note}: {len(unlogged)} unlogged closes:\n" + "\n".join(unlogged[:10])


# -------------------------------------------------------------------------------------------
# MESSAGE_TOO_LARGE, CORRUPT_MESSAGE, INVALID_RECORD
# -------------------------------------------------------------------------------------------


def test_raw_batch_over_message_max_bytes_gets_message_too_large_and_is_not_appended(make_broker, caplog):
    caplog.set_level(logging.WARNING, logger="quafka")
    broker = make_broker(config={"message.max.bytes": 10000})
    with RawClient(broker.bootstrap_servers) as raw:
        topic_id = create_topic(raw, "limited")
        for version in (3, 9, 12):
            assert produce_raw(raw, "limited", build_batch([(b"k", b"small")]), version=version).error_code == 0
        assert log_end_offset(raw, "limited") == 3
        big = build_batch([(b"k", b"x" * 20_000)])
        assert len(big) > 10000
        for version in sorted({3, 7, 9, 10, 12, advertised_ranges(raw)[0][1]}):
            result = produce_raw(raw, "limited", big, version=version, topic_id=topic_id)
            assert result.error_code == ErrorCode.message_too_large, (version, result)
            assert result.base_offset == -1
        # a batch of exactly message.max.bytes is accepted, one byte more is not
        filler = next(f for f in range(10000, 0, -1) if len(build_batch([(b"k", b"y" * f)])) <= 10000)
        exact = build_batch([(b"k", b"y" * filler)])
        assert len(exact) == 10000 and len(build_batch([(b"k", b"y" * (filler + 1))])) == 10001
        assert produce_raw(raw, "limited", build_batch([(b"k", b"y" * (filler + 1))])).error_code == \
            ErrorCode.message_too_large
        assert log_end_offset(raw, "limited") == 3
        assert produce_raw(raw, "limited", exact).error_code == ErrorCode.none
        assert log_end_offset(raw, "limited") == 4
        assert [v for _, v in fetch_values(raw, "limited")] == [b"small"] * 3 + [b"y" * filler]
    assert not internal_errors(caplog)


def test_confluent_producer_with_a_higher_client_limit_gets_msg_size_too_large(make_broker):
    broker = make_broker(config={"message.max.bytes": 10000})
    with RawClient(broker.bootstrap_servers) as raw:
        create_topic(raw, "limited")
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "message.max.bytes": 1_000_000,
                             "linger.ms": 0, "message.timeout.ms": 20000})
        reports: list = []
        producer.produce("limited", value=b"ok", partition=0, on_delivery=lambda e, m: reports.append((e, m)))
        assert producer.flush(20) == 0
        assert reports[0][0] is None and reports[0][1].offset() == 0
        assert log_end_offset(raw, "limited") == 1

        reports.clear()
        producer.produce("limited", value=b"z" * 20_000, partition=0, on_delivery=lambda e, m: reports.append((e, m)))
        assert producer.flush(20) == 0
        assert len(reports) == 1
        err = reports[0][0]
        assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
        assert log_end_offset(raw, "limited") == 1
        assert [v for _, v in fetch_values(raw, "limited")] == [b"ok"]


@pytest.mark.parametrize("where", ["records", "attributes", "max_timestamp", "producer_id", "record_count", "crc"])
@pytest.mark.parametrize("version", [3, 9, 10])
def test_raw_produce_with_corrupted_crc_gets_corrupt_message_and_is_not_appended(broker, caplog, where, version):
    caplog.set_level(logging.WARNING, logger="quafka")
    with RawClient(broker.bootstrap_servers) as raw:
        create_topic(raw, "crc")
        good = build_batch([(b"key-%d" % i, b"value-%d" % i) for i in range(5)])
        assert produce_raw(raw, "crc", good, version=version).error_code == ErrorCode.none
        assert log_end_offset(raw, "crc") == 5
        bad = bytearray(good)
        position = {"records": 61 + len(good[61:]) // 2, "attributes": 22, "max_timestamp": 40,
                    "producer_id": 44, "record_count": 60, "crc": 19}[where]
        bad[position] ^= 0x04
        result = produce_raw(raw, "crc", bytes(bad), version=version)
        assert result.error_code == ErrorCode.corrupt_message, result
        assert result.base_offset == -1
        assert log_end_offset(raw, "crc") == 5
        # the connection is still usable and the log is intact
        assert produce_raw(raw, "crc", good, version=version).base_offset == 5
        assert [v for _, v in fetch_values(raw, "crc")] == [b"value-%d" % i for i in range(5)] * 2
    assert not internal_errors(caplog)


@pytest.mark.parametrize("kind", ["v2 batch with magic byte 1", "legacy magic 1 message", "legacy magic 0 message",
                                  "large legacy magic 1 message"])
def test_raw_produce_with_magic_below_2_gets_invalid_record(broker, caplog, kind):
    """Kafka: ProduceRequest.validateRecords rejects any batch whose magic is not 2 with
    InvalidRecordException -> INVALID_RECORD (87) for Produce v3+, before looking at sizes or CRCs."""
    caplog.set_level(logging.WARNING, logger="quafka")
    with RawClient(broker.bootstrap_servers) as raw:
        create_topic(raw, "magic")
        assert produce_raw(raw, "magic", build_batch([(None, b"first")])).error_code == ErrorCode.none
        if kind == "v2 batch with magic byte 1":
            records = bytearray(build_batch([(None, b"v" * 30)]))
            records[16] = 1
            records = bytes(records)
        elif kind == "legacy magic 1 message":
            records = legacy_message_set(b"old", magic=1)
        elif kind == "legacy magic 0 message":
            records = legacy_message_set(b"old", magic=0)
        else:
            records = legacy_message_set(b"o" * 200, magic=1)
        result = produce_raw(raw, "magic", records)
        assert result.error_code == ErrorCode.invalid_record, (kind, len(records), result)
        assert log_end_offset(raw, "magic") == 1
    assert not internal_errors(caplog)


# -------------------------------------------------------------------------------------------
# single frames with precise expectations
# -------------------------------------------------------------------------------------------


def _closing_warnings(caplog, peer: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("quafka") and peer in r.getMessage()]


@pytest.mark.parametrize("key,version", [(0, 0), (0, 1), (0, 2), (1, 0), (1, 3), (3, 99), (2, 0), (19, 1),
                                         (0, 32767), (3, -1)])
def test_unadvertised_version_closes_only_that_connection(broker, caplog, key, version):
    caplog.set_level(logging.WARNING, logger="quafka")
    with RawClient(broker.bootstrap_servers) as other, RawClient(broker.bootstrap_servers) as bad:
        advertised = advertised_ranges(other)
        lo, hi = advertised[key]
        assert not lo <= version <= hi
        assert advertised_ranges(bad) == advertised  # the connection works before the bad frame
        peer = "%s:%d" % bad.sock.getsockname()
        bad.send_frame(struct.pack(">hhih", key, version, 4242, 4) + b"test" + b"\x00" * 40)
        assert connection_closed(bad)
        assert advertised_ranges(other) == advertised  # the other connection is untouched
    logged = _closing_warnings(caplog, peer)
    assert logged and f"key {key}" in logged[0] and f"version {version}" in logged[0], logged
    assert not internal_errors(caplog)


@pytest.mark.parametrize("key", [1000, 67, 9999, 32767, -1, -32768])
def test_unknown_api_key_closes_the_connection(broker, caplog, key):
    caplog.set_level(logging.WARNING, logger="quafka")
    with RawClient(broker.bootstrap_servers) as other, RawClient(broker.bootstrap_servers) as bad:
        advertised = advertised_ranges(other)
        assert key not in advertised
        peer = "%s:%d" % bad.sock.getsockname()
        bad.send_frame(struct.pack(">hhih", key, 0, 7, 4) + b"test" + b"\x00" * 16)
        assert connection_closed(bad)
        assert advertised_ranges(other) == advertised
    logged = _closing_warnings(caplog, peer)
    assert logged and f"key {key}" in logged[0], logged
    assert not internal_errors(caplog)


@pytest.mark.parametrize("size", [104857601, 2**31 - 1, -1, -(2**31), 0, 3, 7])
def test_size_prefix_outside_the_allowed_range_closes_the_connection(broker, caplog, size):
    caplog.set_level(logging.WARNING, logger="quafka")
    assert int(broker.config.get("socket.request.max.bytes")) == 104857600
    with RawClient(broker.bootstrap_servers) as other, RawClient(broker.bootstrap_servers) as bad:
        peer = "%s:%d" % bad.sock.getsockname()
        bad.sock.sendall(struct.pack(">i", size) + b"\x00\x12\x00\x03" + b"\x00" * 20)
        assert connection_closed(bad)
        assert advertised_ranges(other)
    assert any(str(size) in m for m in _closing_warnings(caplog, peer)), caplog.text
    assert not internal_errors(caplog)


def test_request_above_a_configured_socket_request_max_bytes_closes_the_connection(make_broker, caplog):
    caplog.set_level(logging.WARNING, logger="quafka")
    broker = make_broker(config={"socket.request.max.bytes": 4000})
    with RawClient(broker.bootstrap_servers) as raw:
        create_topic(raw, "sized")
        assert produce_raw(raw, "sized", build_batch([(None, b"a" * 3000)])).error_code == ErrorCode.none
    with RawClient(broker.bootstrap_servers) as raw:
        frame = raw.encode(produce_request("sized", build_batch([(None, b"b" * 5000)])))
        assert len(frame) > 4000
        raw.send_frame(frame)
        assert connection_closed(raw)
    with RawClient(broker.bootstrap_servers) as raw:
        assert log_end_offset(raw, "sized") == 1
    assert not internal_errors(caplog)


@pytest.mark.parametrize("version", [5, 127, 32767])
def test_api_versions_above_the_served_version_gets_the_v0_unsupported_version_reply(broker, version):
    with RawClient(broker.bootstrap_servers) as raw:
        advertised = advertised_ranges(raw)
        assert version > advertised[API_VERSIONS][1]
        # a v3-style body (header v2), as a newer client would send it
        frame = struct.pack(">hhih", API_VERSIONS, version, 31337, 4) + b"test" + b"\x00" + b"\x05newer\x041.0\x00"
        raw.send_frame(frame)
        response = raw.recv_frame()
        assert struct.unpack_from(">i", response)[0] == 31337  # response header v0: the correlation id only
        body, used = entity_reader(ApiVersionsResponseV0)(response, 4)
        assert 4 + used == len(response)
        assert body.error_code == ErrorCode.unsupported_version
        assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == advertised
        # the connection stays open: the client retries with a version the broker serves
        assert advertised_ranges(raw) == advertised


def _metadata_v12_frame(correlation_id: int, header_tags, body_tags, topic_tags) -> bytes:
    """Metadata v12 written by hand: header v2, topics=[{topic_id: null, name: FUZZ_TOPIC}]."""
    client = b"test"
    header = struct.pack(">hhih", 3, 12, correlation_id, len(client)) + client + tag_section(header_tags)
    name = FUZZ_TOPIC.encode()
    topic = b"\x00" * 16 + uvarint(len(name) + 1) + name + tag_section(topic_tags)
    body = uvarint(2) + topic + b"\x00" + b"\x00" + tag_section(body_tags)  # allow_auto, include_authorized_ops
    return header + body


@pytest.mark.parametrize("header_tags,body_tags,topic_tags", [
    ([(1000, b"hdr")], [], []),
    ([], [(7, b"body-tag")], []),
    ([], [], [(42, b"\x01\x02")]),
    ([(0, b""), (5, b"x" * 200)], [(3, b"a"), (2**31 - 1, b"b" * 130)], [(9, b"c")]),
])
def test_metadata_v12_with_unknown_tagged_fields_is_served(broker, caplog, header_tags, body_tags, topic_tags):
    caplog.set_level(logging.WARNING, logger="quafka")
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    with RawClient(broker.bootstrap_servers) as raw:
        topic_id = create_topic(raw, FUZZ_TOPIC, 2)
        # the hand-written frame without tags is exactly what kio writes
        assert _metadata_v12_frame(5, [], [], []) == encode_request(MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=FUZZ_TOPIC),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), 5, client_id="test")
        for attempt in range(2):  # twice on one connection: it stays open
            raw.send_frame(_metadata_v12_frame(100 + attempt, header_tags, body_tags, topic_tags))
            response = raw.recv_frame()
            header, pos = entity_reader(MetadataResponse.__header_schema__)(response, 0)
            assert header.correlation_id == 100 + attempt
            body, used = entity_reader(MetadataResponse)(response, pos)
            assert pos + used == len(response)
            assert [(t.name, t.topic_id, t.error_code, len(t.partitions)) for t in body.topics] == [
                (FUZZ_TOPIC, topic_id, ErrorCode.none, 2)]
        # ApiVersions v3 with an unknown tag in the body is served too
        from kio.schema.api_versions.v3.request import ApiVersionsRequest

        frame = with_unknown_tags(encode_request(ApiVersionsRequest(client_software_name="x",
                                                                    client_software_version="1"), 77),
                                  [(11, b"h")], [(12, b"b" * 10)])
        raw.send_frame(frame)
        response = raw.recv_frame()
        assert check_reply(frame, response, SERVED, advertised_ranges(raw)) is None
    assert not internal_errors(caplog)


# -------------------------------------------------------------------------------------------
# regressions: minimal frames the fuzz run found
# -------------------------------------------------------------------------------------------


def _null_array_variants(entity: Any, path: str = "") -> list[tuple[str, Any]]:
    """Copies of `entity` with one non-nullable array (top level, or inside a first element) null."""
    out = []
    for f in dataclasses.fields(entity):
        shape = classify_field(f)
        value = getattr(entity, f.name)
        if isinstance(shape, (EntityTupleField, PrimitiveTupleField)) and not is_optional(f) \
                and get_field_tag(f) is None:
            out.append((path + f.name, dataclasses.replace(entity, **{f.name: None})))
        if isinstance(shape, EntityTupleField) and value:
            for sub_path, sub in _null_array_variants(value[0], f"{path}{f.name}[0]."):
                out.append((sub_path, dataclasses.replace(entity, **{f.name: (sub,) + tuple(value[1:])})))
    return out


def _error_site(record: logging.LogRecord) -> str:
    """'handlers/offsets.py:60 TypeError: ...' for a logged exception."""
    lines = (record.exc_text or record.getMessage()).splitlines()
    files = re.findall(r'File "[^"]*/(\w+/\w+\.py)", line (\d+)', record.exc_text or "")
    return (f"{files[-1][0]}:{files[-1][1]} " if files else "") + (lines[-1] if lines else "")


def _error_count(caplog) -> int:
    return sum(1 for r in caplog.records if r.levelno >= logging.ERROR)


def test_null_for_a_non_nullable_array_is_refused_without_an_internal_error(broker, caplog):
    """kio decodes a null array length (-1, or compact 0) as None even where the schema says the
    array is not nullable; Kafka fails to parse such a request and closes the connection. The
    broker must refuse it (close, with a log line) or answer it, never crash a handler on None."""
    caplog.set_level(logging.WARNING, logger="quafka")
    with RawClient(broker.bootstrap_servers) as raw:
        advertised = advertised_ranges(raw)
        create_topic(raw, FUZZ_TOPIC, 1)
        topic_id = create_topic(raw, "other-topic")
    sane = EntityMaker(random.Random(0), topic_id, sane=True)
    problems = []
    tried = 0
    first_frame = ""
    for key, (lo, hi) in sorted(advertised.items()):
        for version in range(lo, hi + 1):
            if not _has_class(key, version):
                continue
            for path, entity in _null_array_variants(sane.entity(load_request_schema(key, version), key)):
                tried += 1
                frame = encode_request(entity, 1000 + tried)
                what = f"{api_key_map[key]} v{version} {path}=null"
                first_frame = first_frame or f"{what}: frame {frame.hex()}"
                errors_before = _error_count(caplog)
                with RawClient(broker.bootstrap_servers) as raw:
                    raw.send_frame(frame)
                    raw.sock.settimeout(10)
                    try:
                        problem = check_reply(frame, raw.recv_frame(), SERVED, advertised)
                    except ConnectionError:
                        problem = None  # refused: fine unless it was an internal error
                if problem:
                    problems.append(f"{what}: {problem}")
                if _error_count(caplog) > errors_before:
                    last = [r for r in caplog.records if r.levelno >= logging.ERROR][-1]
                    problems.append(f"{what}: internal error {_error_site(last)}")
    assert tried > 50
    assert not problems, f"{len(problems)} of {tried} frames, first {first_frame}:\n" + "\n".join(problems)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_topic_without_a_name_is_refused_without_an_internal_error(broker, caplog, version):
    """Topic ids in Metadata requests are a v12 feature; in v10-v11 the response cannot carry a
    null topic name (Kafka answers INVALID_REQUEST). Answer or close, but never crash."""
    caplog.set_level(logging.WARNING, logger="quafka")
    cls = load_request_schema(3, version)
    topic_cls = item_class(cls, "topics")
    with RawClient(broker.bootstrap_servers) as raw:
        advertised = advertised_ranges(raw)
        topic_id = create_topic(raw, FUZZ_TOPIC)
    for wanted in (uuid.UUID(int=12345), topic_id):
        frame = encode_request(make(cls, topics=(topic_cls(topic_id=wanted, name=None),),
                                    allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                    include_topic_authorized_operations=False), 9)
        with RawClient(broker.bootstrap_servers) as raw:
            raw.send_frame(frame)
            try:
                response = raw.recv_frame()
            except ConnectionError:
                continue
            assert check_reply(frame, response, SERVED, advertised) is None
    errors = [_error_site(r) for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, f"Metadata v{version} topics=[{{topic_id: X, name: null}}] (frame {frame.hex()}): {errors}"


@pytest.mark.parametrize("validate_only", [True, False])
@pytest.mark.parametrize("version", [2, 3, 4, 5, 6, 7])
def test_create_topics_is_served_at_every_advertised_version(broker, caplog, version, validate_only):
    caplog.set_level(logging.WARNING, logger="quafka")
    cls = load_request_schema(19, version)
    topic_cls = item_class(cls, "topics")
    name = f"created-v{version}-{validate_only}"
    request = make(cls, topics=(make(topic_cls, name=name, num_partitions=2, replication_factor=1, assignments=(),
                                     configs=()),), timeout=datetime.timedelta(seconds=5), validate_only=validate_only)
    with RawClient(broker.bootstrap_servers) as raw:
        low, high = advertised_ranges(raw)[19]
        assert low <= version <= high, f"CreateTopics v{version} must be advertised"
        try:
            resp = raw.request(request)
        except ConnectionError:
            errors = [_error_site(r) for r in caplog.records if r.levelno >= logging.ERROR]
            raise AssertionError(f"CreateTopics v{version} closed the connection: {errors}") from None
        assert [(t.name, t.error_code) for t in resp.topics] == [(name, ErrorCode.none)]
        if version >= 5:
            assert resp.topics[0].num_partitions == 2 and resp.topics[0].configs, resp
    assert not internal_errors(caplog)
