"""The pure-Python fallback reader and the length checker against kio's native reader."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import uuid
from dataclasses import MISSING
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
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
from kio.serial._serialize import get_field_writer
from kio.serial.errors import BufferUnderflow, DecodeError
from kio.serial.readers import tz_aware_from_i64
from kio.serial.writers import write_int8, write_int32, write_unsigned_varint

from quafka.protocol.fallback import ImplausibleLength, fallback_entity_reader, length_checker

SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def all_request_classes() -> list[type]:
    classes = []
    for key, name in sorted(api_key_map.items()):
        for version in sorted(schema_name_map[name]):
            classes.append(load_request_schema(key, version))
    return classes


REQUEST_CLASSES = all_request_classes()
FLEXIBLE_REQUEST_CLASSES = [cls for cls in REQUEST_CLASSES if cls.__flexible__]
HEADER_CLASSES = [RequestHeaderV1, RequestHeaderV2]


def class_id(cls: type) -> str:
    return f"{cls.__module__.removeprefix('kio.schema.')}"


# --------------------------------------------------------------------------------------------
# Value generation from kio's field metadata
# --------------------------------------------------------------------------------------------

_INT_RANGES = {
    "int8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
}


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    if kafka_type in _INT_RANGES:
        bits = _INT_RANGES[kafka_type]
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if kafka_type.startswith("uint"):
        return st.integers(0, 2 ** int(kafka_type[4:]) - 1)
    match kafka_type:
        case "float64":
            return st.floats(allow_nan=False)
        case "bool":
            return st.booleans()
        case "string":
            return st.text(max_size=8)
        case "bytes" | "records":
            return st.binary(max_size=24)
        case "uuid":
            return st.uuids()
        case "error_code":
            return st.sampled_from(list(ErrorCode))
        case "timedelta_i32":
            return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
        case "timedelta_i64":
            return st.integers(-(2**40), 2**40).map(lambda ms: datetime.timedelta(milliseconds=ms))
        case "datetime_i64":
            return st.integers(0, 2**42).map(tz_aware_from_i64)
    raise AssertionError(kafka_type)


def _field_strategy(field: dataclasses.Field) -> st.SearchStrategy[Any]:
    shape = classify_field(field)
    optional = is_optional(field)
    tagged = get_field_tag(field) is not None
    if isinstance(shape, EntityField):
        strategy = entity_strategy(shape.type_)
        if optional:
            strategy = st.none() | strategy
    elif isinstance(shape, EntityTupleField):
        strategy = st.lists(entity_strategy(shape.type_), max_size=2).map(tuple)
        if optional:
            strategy = st.none() | strategy
    else:
        kafka_type = get_schema_field_type(field)
        item = _primitive(kafka_type)
        if isinstance(shape, PrimitiveTupleField):
            if kafka_type == "uuid":
                item = st.none() | item
            strategy = st.lists(item, max_size=3).map(tuple)
            if optional:
                strategy = st.none() | strategy
        else:
            strategy = st.none() | item if optional else item
    if tagged and field.default is not MISSING:
        strategy = st.just(field.default) | strategy
    return strategy


@functools.cache
def entity_strategy(cls: type) -> st.SearchStrategy[Any]:
    return st.builds(cls, **{field.name: _field_strategy(field) for field in dataclasses.fields(cls)})


def encode(cls: type, entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entity)
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------
# A writer that injects unknown tagged fields into every flexible struct
# --------------------------------------------------------------------------------------------

Injector = Callable[[type, frozenset[int]], list[tuple[int, bytes]]]


def no_injection(cls: type, known: frozenset[int]) -> list[tuple[int, bytes]]:
    return []


def write_with_unknown_tags(
    buffer: io.BytesIO, cls: type, entity: Any, inject: Injector, *, nullable: bool = False
) -> None:
    """Mirror of kio's entity_writer that adds the injector's unknown tags to each tag section."""
    if nullable:
        if entity is None:
            write_int8(buffer, -1)
            return
        write_int8(buffer, 1)
    flexible = cls.__flexible__
    is_header = cls.__name__ == "RequestHeader"
    tags: list[tuple[int, bytes]] = []
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        value = getattr(entity, field.name)
        if tag is None:
            _write_field(buffer, cls, field, value, inject, is_header, False)
            continue
        if value == field.default or (field.default is MISSING and value == get_tagged_field_default(field)):
            continue
        sub = io.BytesIO()
        _write_field(sub, cls, field, value, inject, is_header, True)
        tags.append((int(tag), sub.getvalue()))
    if not flexible:
        return
    known = frozenset(int(get_field_tag(f)) for f in dataclasses.fields(cls) if get_field_tag(f) is not None)
    tags.extend(inject(cls, known))
    tags.sort(key=lambda item: item[0])
    write_unsigned_varint(buffer, len(tags))
    for tag, payload in tags:
        write_unsigned_varint(buffer, tag)
        write_unsigned_varint(buffer, len(payload))
        buffer.write(payload)


def _write_field(buffer, cls, field, value, inject, is_header, is_tag) -> None:
    shape = classify_field(field)
    if isinstance(shape, EntityField):
        write_with_unknown_tags(buffer, shape.type_, value, inject, nullable=is_optional(field))
    elif isinstance(shape, EntityTupleField):
        if cls.__flexible__:
            write_unsigned_varint(buffer, 0 if value is None else len(value) + 1)
        else:
            write_int32(buffer, -1 if value is None else len(value))
        for item in value or ():
            write_with_unknown_tags(buffer, shape.type_, item, inject)
    else:
        get_field_writer(field, cls.__flexible__, is_header, is_tag)(buffer, value)


def hypothesis_injector(data: st.DataObject, counter: list[int]) -> Injector:
    def inject(cls: type, known: frozenset[int]) -> list[tuple[int, bytes]]:
        extra = data.draw(
            st.lists(
                st.tuples(
                    st.integers(0, 70000).filter(lambda tag: tag not in known),
                    st.binary(max_size=300),
                ),
                max_size=2,
                unique_by=lambda item: item[0],
            )
        )
        counter[0] += len(extra)
        return extra

    return inject


def with_unknown_tags(cls: type, entity: Any, inject: Injector) -> bytes:
    buffer = io.BytesIO()
    write_with_unknown_tags(buffer, cls, entity, inject)
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------
# Without unknown tags: identical to the native reader
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", REQUEST_CLASSES + HEADER_CLASSES, ids=class_id)
@SETTINGS
@given(data=st.data())
def test_fallback_matches_native(cls: type, data: st.DataObject) -> None:
    entity = data.draw(entity_strategy(cls))
    encoded = encode(cls, entity)
    assert with_unknown_tags(cls, entity, no_injection) == encoded  # the test writer is faithful
    prefix = data.draw(st.binary(max_size=3))
    suffix = data.draw(st.binary(max_size=3))
    framed = prefix + encoded + suffix
    native = entity_reader(cls)(framed, len(prefix))
    assert fallback_entity_reader(cls)(framed, len(prefix)) == native
    assert native[1] == len(encoded)
    assert length_checker(cls)(framed, len(prefix)) == len(encoded)
    # memoryview input works the same
    view = memoryview(framed)
    assert fallback_entity_reader(cls)(view, len(prefix)) == native


# --------------------------------------------------------------------------------------------
# With unknown tags: same entity, all bytes consumed
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", FLEXIBLE_REQUEST_CLASSES + [RequestHeaderV2], ids=class_id)
@SETTINGS
@given(data=st.data())
def test_fallback_skips_unknown_tags(cls: type, data: st.DataObject) -> None:
    entity = data.draw(entity_strategy(cls))
    plain = encode(cls, entity)
    expected = entity_reader(cls)(plain, 0)[0]
    injected_count = [0]
    injected = with_unknown_tags(cls, entity, hypothesis_injector(data, injected_count))
    assert fallback_entity_reader(cls)(injected, 0) == (expected, len(injected))
    assert length_checker(cls)(injected, 0) == len(injected)
    if injected_count[0]:
        with pytest.raises(KeyError, match="Unknown tagged field tag"):
            entity_reader(cls)(injected, 0)


def _always(tag_payloads: list[tuple[int, bytes]]) -> Injector:
    def inject(cls: type, known: frozenset[int]) -> list[tuple[int, bytes]]:
        return [(tag, payload) for tag, payload in tag_payloads if tag not in known]

    return inject


def _examples() -> list[tuple[type, Any]]:
    from kio.schema.fetch.v12 import request as fetch12
    from kio.schema.metadata.v12 import request as metadata12
    from kio.schema.produce.v9 import request as produce9
    from kio.schema.share_fetch.v1 import request as share_fetch1

    topic_id = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    return [
        (
            share_fetch1.ShareFetchRequest,
            share_fetch1.ShareFetchRequest(
                group_id="sg1",
                member_id="AAAAAAAAAAAAAAAAAAAAAA",
                share_session_epoch=1,
                max_wait=datetime.timedelta(milliseconds=500),
                min_bytes=1,
                max_bytes=52428800,
                max_records=500,
                batch_size=500,
                topics=(
                    share_fetch1.FetchTopic(
                        topic_id=topic_id,
                        partitions=(
                            share_fetch1.FetchPartition(
                                partition_index=0,
                                acknowledgement_batches=(
                                    share_fetch1.AcknowledgementBatch(first_offset=0, last_offset=4, acknowledge_types=(1,)),
                                ),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(share_fetch1.ForgottenTopic(topic_id=topic_id, partitions=(1, 2)),),
            ),
        ),
        (
            produce9.ProduceRequest,
            produce9.ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout=datetime.timedelta(seconds=30),
                topic_data=(
                    produce9.TopicProduceData(
                        name="t1",
                        partition_data=(produce9.PartitionProduceData(index=0, records=b"\x00" * 70),),
                    ),
                ),
            ),
        ),
        (
            fetch12.FetchRequest,
            fetch12.FetchRequest(
                cluster_id="cluster",
                max_wait=datetime.timedelta(milliseconds=500),
                min_bytes=1,
                topics=(
                    fetch12.FetchTopic(
                        topic="t1",
                        partitions=(fetch12.FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=1 << 20),),
                    ),
                ),
                forgotten_topics_data=(fetch12.ForgottenTopic(topic="t2", partitions=(3,)),),
                rack_id="r1",
            ),
        ),
        (
            metadata12.MetadataRequest,
            metadata12.MetadataRequest(
                topics=(metadata12.MetadataRequestTopic(topic_id=None, name="t1"),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            ),
        ),
    ]


@pytest.mark.parametrize(("cls", "entity"), _examples(), ids=lambda value: getattr(value, "__name__", ""))
@pytest.mark.parametrize(
    "unknown",
    [
        [(7, b"")],
        [(1, b"xyz"), (99, b"\x01\x02")],
        [(300, bytes(200)), (20000, b"\xff")],  # multi-byte tags and sizes
    ],
)
def test_unknown_tags_at_every_level(cls: type, entity: Any, unknown: list[tuple[int, bytes]]) -> None:
    plain = encode(cls, entity)
    injected = with_unknown_tags(cls, entity, _always(unknown))
    assert len(injected) > len(plain)
    with pytest.raises(KeyError):
        entity_reader(cls)(injected, 0)
    assert fallback_entity_reader(cls)(injected, 0) == (entity, len(injected))
    assert length_checker(cls)(injected, 0) == len(injected)


def test_unknown_tags_in_request_header_v2() -> None:
    header = RequestHeaderV2(request_api_key=78, request_api_version=1, correlation_id=7, client_id="rdkafka")
    plain = encode(RequestHeaderV2, header)
    injected = with_unknown_tags(RequestHeaderV2, header, _always([(0, b"abc"), (5, b"")]))
    assert injected == plain[:-1] + b"\x02\x00\x03abc\x05\x00"
    with pytest.raises(KeyError):
        entity_reader(RequestHeaderV2)(injected, 0)
    reader = fallback_entity_reader(RequestHeaderV2, is_request_header=True)
    assert reader(injected + b"body", 0) == (header, len(injected))
    # client_id stays a legacy (int16-length) string in the flexible header
    assert plain == struct.pack(">hhih", 78, 1, 7, 7) + b"rdkafka" + b"\x00"


def test_readers_are_cached() -> None:
    cls = REQUEST_CLASSES[0]
    assert fallback_entity_reader(cls) is fallback_entity_reader(cls)


# --------------------------------------------------------------------------------------------
# Malformed input
# --------------------------------------------------------------------------------------------


def test_unknown_tag_payload_past_the_end() -> None:
    header = RequestHeaderV2(request_api_key=3, request_api_version=12, correlation_id=1, client_id=None)
    data = encode(RequestHeaderV2, header)[:-1] + b"\x01\x09\x10abc"  # claims 16 bytes, has 3
    with pytest.raises(BufferUnderflow):
        fallback_entity_reader(RequestHeaderV2)(data, 0)
    with pytest.raises(BufferUnderflow):
        length_checker(RequestHeaderV2)(data, 0)


HUGE_COMPACT_LENGTH = b"\xff\xff\xff\xff\x0f"  # 2**35 - 1: kio would pre-allocate 256 GiB and abort


def test_huge_compact_array_length_is_rejected_before_kio_allocates() -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    body = HUGE_COMPACT_LENGTH + b"\x00\x00\x00"
    with pytest.raises(ImplausibleLength):
        length_checker(MetadataRequest)(body, 0)
    with pytest.raises(ImplausibleLength):
        fallback_entity_reader(MetadataRequest)(body, 0)


def test_huge_nested_and_primitive_array_lengths_are_rejected() -> None:
    from kio.schema.share_fetch.v1.request import ShareFetchRequest

    prefix = b"\x00\x01" + b"\x00" * 24  # group_id null, member_id "", epoch..batch_size
    for tail in (
        HUGE_COMPACT_LENGTH,  # topics
        b"\x02" + bytes(16) + b"\x02" + b"\x00\x00\x00\x00" + HUGE_COMPACT_LENGTH,  # ack batches
        b"\x01\x02" + bytes(16) + HUGE_COMPACT_LENGTH,  # forgotten partitions (int32 array)
    ):
        data = prefix + tail + bytes(8)
        with pytest.raises(ImplausibleLength):
            length_checker(ShareFetchRequest)(data, 0)
        with pytest.raises(ImplausibleLength):
            fallback_entity_reader(ShareFetchRequest)(data, 0)


def test_huge_legacy_array_length_is_rejected() -> None:
    from kio.schema.metadata.v1.request import MetadataRequest

    data = struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01t"
    with pytest.raises(ImplausibleLength):
        length_checker(MetadataRequest)(data, 0)
    with pytest.raises(ImplausibleLength):
        fallback_entity_reader(MetadataRequest)(data, 0)


def test_array_length_bound_uses_minimum_item_size() -> None:
    from kio.schema.share_fetch.v1.request import ForgottenTopic

    # 5 int32 partitions need 20 bytes; only 19 follow (16 would suffice for a 1-byte bound).
    data = bytes(16) + b"\x06" + bytes(19)
    with pytest.raises(ImplausibleLength):
        length_checker(ForgottenTopic)(data, 0)
    ok = bytes(16) + b"\x06" + bytes(20) + b"\x00"
    assert length_checker(ForgottenTopic)(ok, 0) == len(ok)
    assert fallback_entity_reader(ForgottenTopic)(ok, 0) == entity_reader(ForgottenTopic)(ok, 0)


@pytest.mark.parametrize("cls", FLEXIBLE_REQUEST_CLASSES[::7] + [RequestHeaderV1], ids=class_id)
@SETTINGS
@given(data=st.data())
def test_truncated_input_raises_decode_errors(cls: type, data: st.DataObject) -> None:
    encoded = encode(cls, data.draw(entity_strategy(cls)))
    cut = data.draw(st.integers(0, max(len(encoded) - 1, 0)))
    truncated = encoded[:cut]
    with pytest.raises((DecodeError, ValueError, IndexError)):
        length_checker(cls)(truncated, 0)
    with pytest.raises((DecodeError, ValueError)):
        fallback_entity_reader(cls)(truncated, 0)
