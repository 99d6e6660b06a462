"""Request decoding, response encoding and the ApiVersions fallback."""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

from quafka.protocol.errors import ProtocolError
from quafka.protocol.framing import (
    api_versions_fallback_response,
    build,
    decode_request,
    encode_response,
    peek_header,
    request_class,
)

ALL_VERSIONS = [
    (key, version) for key, name in sorted(api_key_map.items()) for version in sorted(schema_name_map[name])
]


def encode(cls: type, entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entity)
    return buffer.getvalue()


_SAMPLE_PRIMITIVES = {
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "uint16": 5,
    "float64": 1.5,
    "bool": True,
    "string": "s",
    "bytes": b"b",
    "records": b"rec",
    "uuid": uuid.UUID(int=42),
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(milliseconds=6),
    "timedelta_i64": datetime.timedelta(milliseconds=7),
    "datetime_i64": datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc),
}


def sample_instance(cls: type) -> Any:
    """A deterministic instance with every array holding one item (tagged fields left default)."""
    values = {}
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            if field.default is dataclasses.MISSING:  # a few tagged fields have no default
                values[field.name] = get_tagged_field_default(field)
            continue
        shape = classify_field(field)
        if isinstance(shape, EntityField):
            values[field.name] = sample_instance(shape.type_)
        elif isinstance(shape, EntityTupleField):
            values[field.name] = (sample_instance(shape.type_),)
        elif isinstance(shape, PrimitiveTupleField):
            values[field.name] = (_SAMPLE_PRIMITIVES[get_schema_field_type(field)],)
        else:
            values[field.name] = _SAMPLE_PRIMITIVES[get_schema_field_type(field)]
    return cls(**values)


def request_frame(key: int, version: int, correlation_id: int = 77, body: Any = None) -> tuple[bytes, Any, Any]:
    cls = load_request_schema(key, version)
    header_cls = cls.__header_schema__
    header = header_cls(
        request_api_key=key, request_api_version=version, correlation_id=correlation_id, client_id="quafka-test"
    )
    body = sample_instance(cls) if body is None else body
    return encode(header_cls, header) + encode(cls, body), header, body


VALID_FRAMES = [request_frame(key, version)[0] for key, version in ALL_VERSIONS]


# --------------------------------------------------------------------------------------------
# peek_header / request_class
# --------------------------------------------------------------------------------------------


def test_peek_header() -> None:
    assert peek_header(struct.pack(">hhi", 18, 3, -5) + b"rest") == (18, 3, -5)
    assert peek_header(memoryview(struct.pack(">hhi", 0, 9, 1))) == (0, 9, 1)


@pytest.mark.parametrize("length", range(8))
def test_short_frames(length: int) -> None:
    frame = struct.pack(">hhi", 18, 3, 1)[:length]
    with pytest.raises(ProtocolError):
        peek_header(frame)
    with pytest.raises(ProtocolError):
        decode_request(frame)


def test_request_class_is_cached() -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    assert request_class(3, 12) is MetadataRequest
    before = request_class.cache_info().hits
    assert request_class(3, 12) is MetadataRequest
    assert request_class.cache_info().hits == before + 1


@pytest.mark.parametrize(("key", "version"), [(9999, 0), (-1, 0), (18, 5), (0, 2), (42, 3), (3, -1)])
def test_unknown_key_or_version(key: int, version: int) -> None:
    with pytest.raises(ProtocolError):
        request_class(key, version)
    with pytest.raises(ProtocolError):
        decode_request(struct.pack(">hhih", key, version, 1, -1) + b"\x00" * 8)


# --------------------------------------------------------------------------------------------
# decode_request
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS)
def test_decode_round_trip_every_request(key: int, version: int) -> None:
    frame, header, body = request_frame(key, version)
    assert decode_request(frame) == (header, body)
    assert decode_request(bytearray(frame)) == (header, body)
    assert decode_request(memoryview(bytearray(frame))) == (header, body)


def test_header_versions_follow_the_class() -> None:
    frame, header, _ = request_frame(19, 4)  # CreateTopics v4 from librdkafka: non-flexible
    assert type(header) is RequestHeaderV1
    assert decode_request(frame)[0] == header
    frame, header, _ = request_frame(18, 3)
    assert type(header) is RequestHeaderV2


def test_unknown_tag_in_header_takes_fallback_path() -> None:
    frame, header, body = request_frame(3, 12)
    header_len = len(encode(RequestHeaderV2, header))
    assert frame[header_len - 1] == 0  # empty header tag section
    tagged = frame[: header_len - 1] + b"\x01\x05\x02hi" + frame[header_len:]
    assert decode_request(tagged) == (header, body)


def test_unknown_tag_in_body_takes_fallback_path() -> None:
    frame, header, body = request_frame(3, 12)
    assert frame[-1] == 0  # empty body tag section
    tagged = frame[:-1] + b"\x02\x00\x00\xe8\x07\x03abc"  # tags 0 and 1000 (two-byte uvarint)
    assert decode_request(tagged) == (header, body)
    both = tagged.replace(b"quafka-test\x00", b"quafka-test\x01\x09\x00", 1)
    assert decode_request(both) == (header, body)


def test_unknown_tag_in_nested_struct() -> None:
    from kio.schema.share_fetch.v1 import request as sf

    body = sf.ShareFetchRequest(
        group_id="sg1",
        member_id="m",
        share_session_epoch=0,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_records=500,
        batch_size=500,
        topics=(
            sf.FetchTopic(
                topic_id=uuid.UUID(int=1),
                partitions=(sf.FetchPartition(partition_index=3, acknowledgement_batches=()),),
            ),
        ),
        forgotten_topics_data=(),
    )
    frame, header, _ = request_frame(78, 1, body=body)
    # FetchPartition ends with partition_index (4 bytes), empty batches (0x01), empty tags (0x00)
    marker = struct.pack(">i", 3) + b"\x01\x00"
    assert frame.count(marker) == 1
    tagged = frame.replace(marker, struct.pack(">i", 3) + b"\x01\x01\x04\x01z")
    assert decode_request(tagged) == (header, body)


def test_trailing_bytes_are_ignored() -> None:
    # librdkafka's Metadata "all topics" request at v9+ leaves 3 bytes kio does not consume.
    header = RequestHeaderV2(request_api_key=3, request_api_version=12, correlation_id=9, client_id="rdkafka")
    frame = encode(RequestHeaderV2, header) + bytes.fromhex("00000000010000")
    decoded_header, body = decode_request(frame)
    assert decoded_header == header
    assert body.topics is None
    assert body.allow_auto_topic_creation is False
    assert body.include_topic_authorized_operations is False


def test_huge_array_length_is_a_protocol_error_not_an_abort() -> None:
    # kio's native reader would try to allocate 256 GiB for this array and abort the process.
    header = RequestHeaderV2(request_api_key=3, request_api_version=12, correlation_id=9, client_id=None)
    frame = encode(RequestHeaderV2, header) + b"\xff\xff\xff\xff\x0f\x00\x00\x00"
    with pytest.raises(ProtocolError, match="Metadata|metadata"):
        decode_request(frame)
    # the same behind an unknown header tag (fallback path)
    tagged = frame.replace(b"\xff\xff\x00\xff", b"\xff\xff\x01\x01\x00\xff", 1)
    with pytest.raises(ProtocolError):
        decode_request(tagged)


def test_protocol_error_names_key_and_version() -> None:
    frame, _, _ = request_frame(0, 9)
    with pytest.raises(ProtocolError, match=r"produce.*key 0.*v9"):
        decode_request(frame[:-3])


GARBAGE_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


def _decode_or_protocol_error(frame: bytes) -> None:
    try:
        decode_request(frame)
    except ProtocolError:
        pass


@GARBAGE_SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_protocol_error(frame: bytes) -> None:
    _decode_or_protocol_error(frame)


@GARBAGE_SETTINGS
@given(st.sampled_from(ALL_VERSIONS), st.binary(max_size=120))
def test_random_bodies_raise_only_protocol_error(key_version: tuple[int, int], tail: bytes) -> None:
    key, version = key_version
    _decode_or_protocol_error(struct.pack(">hhi", key, version, 1) + tail)


# Byte patterns that reach kio's allocation paths: huge compact/legacy lengths, null markers.
_PATCHES = st.sampled_from(
    [b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08", b"\x7f\xff\xff\xff", b"\xff\xff", b"\x00", b"\x01", b"\x80"]
) | st.binary(min_size=1, max_size=5)


@GARBAGE_SETTINGS
@given(st.sampled_from(VALID_FRAMES), st.data())
def test_truncated_and_mutated_frames_raise_only_protocol_error(frame: bytes, data: st.DataObject) -> None:
    _decode_or_protocol_error(frame[: data.draw(st.integers(0, len(frame)))])
    mutated = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(8, len(mutated)))
        patch = data.draw(_PATCHES)
        if data.draw(st.booleans()):
            mutated[position:position] = patch  # insert
        else:
            mutated[position : position + len(patch)] = patch  # overwrite
    _decode_or_protocol_error(bytes(mutated))
    _decode_or_protocol_error(bytes(mutated[: data.draw(st.integers(0, len(mutated)))]))


_HUGE_LENGTHS = (b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08", b"\x7f\xff\xff\xff", b"\x10\x00\x00\x00")


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS)
def test_huge_lengths_at_every_position_raise_only_protocol_error(key: int, version: int) -> None:
    """Exhaustive: every huge compact/legacy length pattern, written over or into every position.

    Without ``length_checker`` some of these frames make kio's native reader abort the process.
    """
    frame, _, _ = request_frame(key, version)
    for position in range(8, len(frame) + 1):
        for pattern in _HUGE_LENGTHS:
            _decode_or_protocol_error(frame[:position] + pattern + frame[position + len(pattern) :])
            _decode_or_protocol_error(frame[:position] + pattern + frame[position:])


def test_every_request_class_compiles_natively() -> None:
    # kio compiles a native schema per class on first use; a class it cannot compile would raise
    # NotImplementedError from decode_request, which is not a decode error.
    for key, version in ALL_VERSIONS:
        cls = load_request_schema(key, version)
        entity_reader(cls)
        entity_reader(cls.__header_schema__)


# --------------------------------------------------------------------------------------------
# encode_response / build / ApiVersions fallback
# --------------------------------------------------------------------------------------------


def _kio_frame(correlation_id: int, body: Any) -> bytes:
    header_cls = type(body).__header_schema__
    payload = encode(header_cls, header_cls(correlation_id=correlation_id)) + encode(type(body), body)
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize(("key", "version"), ALL_VERSIONS)
def test_encode_response_matches_kio(key: int, version: int) -> None:
    cls = load_response_schema(key, version)
    body = sample_instance(cls)
    frame = encode_response(-123, body)
    assert frame == _kio_frame(-123, body)
    header_cls = cls.__header_schema__
    header, offset = entity_reader(header_cls)(frame, 4)
    assert header.correlation_id == -123
    decoded, used = entity_reader(cls)(frame, 4 + offset)
    assert 4 + offset + used == len(frame)


def test_response_header_versions() -> None:
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    from kio.schema.metadata.v12.response import MetadataResponse

    assert ApiVersionsResponse.__header_schema__ is ResponseHeaderV0  # always v0
    assert MetadataResponse.__header_schema__ is ResponseHeaderV1
    frame = encode_response(5, sample_instance(MetadataResponse))
    assert frame[4:9] == b"\x00\x00\x00\x05\x00"


def test_build_keeps_only_fields_of_the_class() -> None:
    from kio.schema.api_versions.v0.response import ApiVersionsResponse as V0
    from kio.schema.api_versions.v3.response import ApiVersionsResponse as V3

    values = dict(error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0), bogus=1)
    assert build(V0, **values) == V0(error_code=ErrorCode.none, api_keys=())
    assert build(V3, **values).throttle_time == datetime.timedelta(0)
    with pytest.raises(TypeError):
        build(V3, error_code=ErrorCode.none)


def test_api_versions_fallback_response() -> None:
    from kio.schema.api_versions.v0.response import ApiVersionsResponse

    ranges = [(0, 3, 10), (1, 4, 16), (18, 0, 4)]
    frame = api_versions_fallback_response(31, ranges)
    size, correlation_id = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4
    assert correlation_id == 31
    body, used = entity_reader(ApiVersionsResponse)(frame, 8)  # header v0: no tag section
    assert 8 + used == len(frame)
    assert body.error_code == ErrorCode.unsupported_version == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == ranges
    assert frame[8:10] == b"\x00\x23"
