"""The hand-written Produce/Fetch response encoders, byte for byte against kio."""

from __future__ import annotations

import datetime
import sys
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.readers import tz_aware_from_i64

from quafka.protocol.framing import build, encode_response
from quafka.protocol.hot_encoders import (
    FETCH_VERSIONS,
    PRODUCE_VERSIONS,
    FetchPartitionResult,
    ProducePartitionResult,
    encode_fetch_response,
    encode_produce_response,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
error_codes = st.sampled_from([int(code) for code in ErrorCode])
messages = st.none() | st.text(max_size=20)
topic_names = st.text(min_size=1, max_size=30)  # unicode included
topic_ids = st.none() | st.uuids().filter(lambda value: value.int != 0)


def _nested(response_cls: type, name: str) -> Any:
    """A nested struct class of the response's module (None if this version lacks it)."""
    return getattr(sys.modules[response_cls.__module__], name, None)


def _check_frame(frame: bytes, response_cls: type, expected: Any, correlation_id: int) -> None:
    """Decode a hand-encoded frame with kio and compare with the entity kio would have sent."""
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, offset = entity_reader(response_cls.__header_schema__)(frame, 4)
    assert header.correlation_id == correlation_id
    body, used = entity_reader(response_cls)(frame, 4 + offset)
    assert 4 + offset + used == len(frame)
    assert body == expected


# --------------------------------------------------------------------------------------------
# Produce
# --------------------------------------------------------------------------------------------

produce_partitions = st.builds(
    ProducePartitionResult,
    index=int32,
    error_code=error_codes,
    base_offset=int64,
    log_append_time_ms=st.just(-1) | st.integers(0, 2**41),
    log_start_offset=int64,
    error_message=messages,
    record_errors=st.lists(st.tuples(int32, messages), max_size=3),
)
produce_topics = st.lists(
    st.tuples(topic_names, topic_ids, st.lists(produce_partitions, max_size=3)), max_size=3
)


def kio_produce_response(version: int, topics: list, throttle_time_ms: int) -> Any:
    cls = load_response_schema(0, version)
    topic_cls = _nested(cls, "TopicProduceResponse")
    partition_cls = _nested(cls, "PartitionProduceResponse")
    batch_error_cls = _nested(cls, "BatchIndexAndErrorMessage")
    return build(
        cls,
        throttle_time=datetime.timedelta(milliseconds=throttle_time_ms),
        responses=tuple(
            build(
                topic_cls,
                name=name,
                topic_id=topic_id,
                partition_responses=tuple(
                    build(
                        partition_cls,
                        index=p.index,
                        error_code=ErrorCode(p.error_code),
                        base_offset=p.base_offset,
                        log_append_time=None if p.log_append_time_ms == -1 else tz_aware_from_i64(p.log_append_time_ms),
                        log_start_offset=p.log_start_offset,
                        record_errors=()
                        if batch_error_cls is None  # before v8
                        else tuple(
                            batch_error_cls(batch_index=index, batch_index_error_message=message)
                            for index, message in p.record_errors
                        ),
                        error_message=p.error_message,
                    )
                    for p in partitions
                ),
            )
            for name, topic_id, partitions in topics
        ),
    )


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@SETTINGS
@given(topics=produce_topics, throttle_time_ms=int32, correlation_id=int32)
def test_produce_matches_kio(version: int, topics: list, throttle_time_ms: int, correlation_id: int) -> None:
    frame = encode_produce_response(version, correlation_id, topics, throttle_time_ms)
    expected = kio_produce_response(version, topics, throttle_time_ms)
    assert frame == encode_response(correlation_id, expected)
    _check_frame(frame, type(expected), expected, correlation_id)


def test_produce_known_bytes_v9() -> None:
    frame = encode_produce_response(
        9, 7, [("t", None, [ProducePartitionResult(0, 0, 5, -1, 0)])], throttle_time_ms=0
    )
    assert frame.hex() == (
        "00000030"  # size: 48 bytes follow
        "00000007" "00"  # correlation id, header tags
        "02" "0274"  # 1 topic, name "t"
        "02" "00000000" "0000" "0000000000000005" "ffffffffffffffff" "0000000000000000"
        "01" "00" "00"  # no record errors, null error message, partition tags
        "00"  # topic tags
        "00000000" "00"  # throttle time, top-level tags
    )


def test_produce_defaults_and_topic_id() -> None:
    topic_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    frame = encode_produce_response(13, 1, [(None, topic_id, [ProducePartitionResult(3, 0, 10, -1, 0)])])
    assert topic_id.bytes in frame
    assert encode_produce_response(13, 1, [(None, None, [])])[10:26] == bytes(16)
    with pytest.raises(ValueError):
        encode_produce_response(2, 1, [])
    with pytest.raises(ValueError):
        encode_produce_response(14, 1, [])


# --------------------------------------------------------------------------------------------
# Fetch
# --------------------------------------------------------------------------------------------

records_values = st.one_of(
    st.just(b""),
    st.binary(min_size=1, max_size=300),
    st.binary(min_size=1, max_size=300).map(memoryview),
    st.binary(min_size=3, max_size=300).map(lambda data: memoryview(bytearray(data))[1:-1]),
    st.none(),
)
fetch_partitions = st.builds(
    FetchPartitionResult,
    index=int32,
    error_code=error_codes,
    high_watermark=int64,
    last_stable_offset=int64,
    log_start_offset=int64,
    records=records_values,
    aborted_transactions=st.none() | st.lists(st.tuples(int64, int64), max_size=3),
    preferred_read_replica=int32,
)
fetch_topics = st.lists(st.tuples(topic_names, topic_ids, st.lists(fetch_partitions, max_size=3)), max_size=3)


def kio_fetch_response(version: int, topics: list, throttle_time_ms: int, error_code: int, session_id: int) -> Any:
    cls = load_response_schema(1, version)
    topic_cls = _nested(cls, "FetchableTopicResponse")
    partition_cls = _nested(cls, "PartitionData")
    aborted_cls = _nested(cls, "AbortedTransaction")
    return build(
        cls,
        throttle_time=datetime.timedelta(milliseconds=throttle_time_ms),
        error_code=ErrorCode(error_code),
        session_id=session_id,
        responses=tuple(
            build(
                topic_cls,
                topic=name,
                topic_id=topic_id,
                partitions=tuple(
                    build(
                        partition_cls,
                        partition_index=p.index,
                        error_code=ErrorCode(p.error_code),
                        high_watermark=p.high_watermark,
                        last_stable_offset=p.last_stable_offset,
                        log_start_offset=p.log_start_offset,
                        aborted_transactions=None
                        if p.aborted_transactions is None
                        else tuple(
                            aborted_cls(producer_id=producer_id, first_offset=first_offset)
                            for producer_id, first_offset in p.aborted_transactions
                        ),
                        preferred_read_replica=p.preferred_read_replica,
                        records=b"" if p.records is None else bytes(p.records),
                    )
                    for p in partitions
                ),
            )
            for name, topic_id, partitions in topics
        ),
    )


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@SETTINGS
@given(
    topics=fetch_topics,
    throttle_time_ms=int32,
    error_code=error_codes,
    session_id=int32,
    correlation_id=int32,
)
def test_fetch_matches_kio(
    version: int, topics: list, throttle_time_ms: int, error_code: int, session_id: int, correlation_id: int
) -> None:
    frame = encode_fetch_response(
        version,
        correlation_id,
        topics,
        throttle_time_ms=throttle_time_ms,
        error_code=error_code,
        session_id=session_id,
    )
    expected = kio_fetch_response(version, topics, throttle_time_ms, error_code, session_id)
    assert frame == encode_response(correlation_id, expected)
    _check_frame(frame, type(expected), expected, correlation_id)


def test_fetch_large_records_and_multibyte_lengths() -> None:
    records = bytes(range(256)) * 70  # 17,920 bytes: a 3-byte compact length
    partition = FetchPartitionResult(0, 0, 100, 100, 0, memoryview(records), [(7, 3)], 1)
    for version in (4, 11, 12, 16, 18):
        frame = encode_fetch_response(version, 5, [("topic", uuid.UUID(int=9), [partition])])
        expected = kio_fetch_response(version, [("topic", uuid.UUID(int=9), [partition])], 0, 0, 0)
        assert frame == encode_response(5, expected)
        assert records in frame


def test_fetch_rejects_unknown_versions() -> None:
    with pytest.raises(ValueError):
        encode_fetch_response(3, 1, [])
    with pytest.raises(ValueError):
        encode_fetch_response(19, 1, [])
