"""The hand-written ShareFetch/ShareAcknowledge response encoders, byte for byte against kio."""

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

from quafka.protocol.framing import build, encode_response
from quafka.protocol.share_encoders import (
    SHARE_ACKNOWLEDGE_VERSIONS,
    SHARE_FETCH_VERSIONS,
    ShareAcknowledgePartitionResult,
    ShareFetchPartitionResult,
    encode_share_acknowledge_response,
    encode_share_fetch_response,
)

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
error_codes = st.sampled_from([int(code) for code in ErrorCode])
messages = st.none() | st.text(max_size=20) | st.text(min_size=120, max_size=200)
topic_ids = st.none() | st.uuids().filter(lambda value: value.int != 0)
records_values = st.one_of(
    st.just(b""),
    st.none(),
    st.binary(min_size=1, max_size=300),
    st.binary(min_size=1, max_size=300).map(memoryview),
    st.binary(min_size=3, max_size=300).map(lambda data: memoryview(bytearray(data))[1:-1]),
)

TOPIC_A = uuid.UUID("12345678-1234-5678-1234-567812345678")
TOPIC_B = uuid.UUID(int=9)


def _nested(response_cls: type, name: str) -> Any:
    return getattr(sys.modules[response_cls.__module__], name)


def _check_frame(frame: bytes, expected: Any, correlation_id: int) -> None:
    """Equal to kio's frame, and decodes with kio back to the entity kio would have sent."""
    assert frame == encode_response(correlation_id, expected)
    cls = type(expected)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, offset = entity_reader(cls.__header_schema__)(frame, 4)
    assert header.correlation_id == correlation_id
    body, used = entity_reader(cls)(frame, 4 + offset)
    assert 4 + offset + used == len(frame)
    assert body == expected


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


# --------------------------------------------------------------------------------------------
# ShareFetch
# --------------------------------------------------------------------------------------------


def kio_share_fetch(version: int, topics: Any = (), *, error_code: int = 0, error_message: str | None = None,
                    acquisition_lock_timeout_ms: int = 0, throttle_time_ms: int = 0) -> Any:
    cls = load_response_schema(78, version)
    topic_cls = _nested(cls, "ShareFetchableTopicResponse")
    partition_cls = _nested(cls, "PartitionData")
    leader_cls = _nested(cls, "LeaderIdAndEpoch")
    acquired_cls = _nested(cls, "AcquiredRecords")
    return build(
        cls,
        throttle_time=_ms(throttle_time_ms),
        error_code=ErrorCode(error_code),
        error_message=error_message,
        acquisition_lock_timeout=_ms(acquisition_lock_timeout_ms),
        responses=tuple(
            topic_cls(
                topic_id=topic_id,
                partitions=tuple(
                    partition_cls(
                        partition_index=p.index,
                        error_code=ErrorCode(p.error_code),
                        error_message=p.error_message,
                        acknowledge_error_code=p.acknowledge_error_code,
                        acknowledge_error_message=p.acknowledge_error_message,
                        current_leader=leader_cls(leader_id=p.leader_id, leader_epoch=p.leader_epoch),
                        records=b"" if p.records is None else bytes(p.records),
                        acquired_records=tuple(
                            acquired_cls(first_offset=first, last_offset=last, delivery_count=count)
                            for first, last, count in p.acquired_records
                        ),
                    )
                    for p in partitions
                ),
            )
            for topic_id, partitions in topics
        ),
        node_endpoints=(),
    )


def _check_share_fetch(version: int, correlation_id: int, topics: Any = (), **kwargs: Any) -> bytes:
    frame = encode_share_fetch_response(version, correlation_id, topics, **kwargs)
    _check_frame(frame, kio_share_fetch(version, topics, **kwargs), correlation_id)
    return frame


share_fetch_partitions = st.builds(
    ShareFetchPartitionResult,
    index=int32,
    error_code=error_codes,
    acknowledge_error_code=int16,
    leader_id=int32,
    leader_epoch=int32,
    records=records_values,
    acquired_records=st.lists(st.tuples(int64, int64, int16), max_size=4),
    error_message=messages,
    acknowledge_error_message=messages,
)
share_fetch_topics = st.lists(st.tuples(topic_ids, st.lists(share_fetch_partitions, max_size=3)), max_size=3)


@pytest.mark.parametrize("version", SHARE_FETCH_VERSIONS)
@SETTINGS
@given(
    topics=share_fetch_topics,
    error_code=error_codes,
    error_message=messages,
    acquisition_lock_timeout_ms=int32,
    throttle_time_ms=int32,
    correlation_id=int32,
)
def test_share_fetch_matches_kio(version: int, topics: list, error_code: int, error_message: str | None,
                                 acquisition_lock_timeout_ms: int, throttle_time_ms: int,
                                 correlation_id: int) -> None:
    _check_share_fetch(version, correlation_id, topics, error_code=error_code, error_message=error_message,
                       acquisition_lock_timeout_ms=acquisition_lock_timeout_ms, throttle_time_ms=throttle_time_ms)


@pytest.mark.parametrize("version", SHARE_FETCH_VERSIONS)
def test_share_fetch_empty(version: int) -> None:
    frame = _check_share_fetch(version, 7)
    assert frame.hex() == (
        "00000013"  # size: 19 bytes follow
        "00000007" "00"  # correlation id, header tags
        "00000000" "0000" "00"  # throttle time, error code, null error message
        "00000000"  # acquisition lock timeout
        "01" "01" "00"  # no responses, no node endpoints, top-level tags
    )
    _check_share_fetch(version, 7, [], acquisition_lock_timeout_ms=30_000)


@pytest.mark.parametrize("version", SHARE_FETCH_VERSIONS)
def test_share_fetch_top_level_error(version: int) -> None:
    _check_share_fetch(version, -1, error_code=ErrorCode.invalid_request, error_message="GroupId must be set")
    _check_share_fetch(version, 3, error_code=int(ErrorCode.share_session_not_found), error_message="",
                       acquisition_lock_timeout_ms=30_000, throttle_time_ms=5)


@pytest.mark.parametrize("version", SHARE_FETCH_VERSIONS)
def test_share_fetch_several_topics_and_partitions(version: int) -> None:
    records = bytes(range(256)) * 3
    topics = [
        (TOPIC_A, [
            ShareFetchPartitionResult(0, 0, 0, 1, 0, records, [(0, 9, 1)]),
            ShareFetchPartitionResult(1, 0, 0, 1, 0, memoryview(records)[10:100], [(10, 99, 2), (120, 120, 5)]),
            ShareFetchPartitionResult(2, 0, int(ErrorCode.invalid_record_state), 1, 0, b"", []),
            ShareFetchPartitionResult(3, 0, 0, 1, 0, None),
        ]),
        (TOPIC_B, [
            ShareFetchPartitionResult(0, int(ErrorCode.unknown_topic_or_partition), 0, -1, -1, b"", (),
                                      error_message="no such partition",
                                      acknowledge_error_message="not acknowledged"),
            ShareFetchPartitionResult(7, 0, 0, 1, 0, memoryview(bytearray(records)), [],
                                      acknowledge_error_message="ünïcode ✓"),
        ]),
        (None, []),
    ]
    frame = _check_share_fetch(version, 42, topics, acquisition_lock_timeout_ms=30_000)
    assert records in frame


@pytest.mark.parametrize("version", SHARE_FETCH_VERSIONS)
def test_share_fetch_large_varint_lengths(version: int) -> None:
    records_2 = b"r" * 200  # 2-byte compact length
    records_3 = bytes(range(256)) * 70  # 17,920 bytes: a 3-byte compact length
    acquired = [(i * 10, i * 10 + 9, i % 7 + 1) for i in range(20_000)]  # 3-byte array length
    many_partitions = [ShareFetchPartitionResult(i, 0, 0, 1, 0, b"") for i in range(130)]
    topics = [
        (TOPIC_A, [
            ShareFetchPartitionResult(0, 0, 0, 1, 0, records_2, acquired[:200], error_message="e" * 130),
            ShareFetchPartitionResult(1, 0, 0, 1, 0, memoryview(records_3), acquired,
                                      acknowledge_error_message="a" * 17_000),
        ]),
        (TOPIC_B, many_partitions),
    ]
    topics += [(uuid.UUID(int=i + 100), []) for i in range(200)]
    frame = _check_share_fetch(version, 1, topics, error_message="m" * 20_000)
    assert records_3 in frame


def test_share_fetch_rejects_unknown_versions() -> None:
    for version in (0, 3):
        with pytest.raises(ValueError):
            encode_share_fetch_response(version, 1)


# --------------------------------------------------------------------------------------------
# ShareAcknowledge
# --------------------------------------------------------------------------------------------


def kio_share_acknowledge(version: int, topics: Any = (), *, error_code: int = 0, error_message: str | None = None,
                          acquisition_lock_timeout_ms: int = 0, throttle_time_ms: int = 0) -> Any:
    cls = load_response_schema(79, version)
    topic_cls = _nested(cls, "ShareAcknowledgeTopicResponse")
    partition_cls = _nested(cls, "PartitionData")
    leader_cls = _nested(cls, "LeaderIdAndEpoch")
    return build(
        cls,
        throttle_time=_ms(throttle_time_ms),
        error_code=ErrorCode(error_code),
        error_message=error_message,
        acquisition_lock_timeout=_ms(acquisition_lock_timeout_ms),  # v2 only; build drops it for v1
        responses=tuple(
            topic_cls(
                topic_id=topic_id,
                partitions=tuple(
                    partition_cls(
                        partition_index=p.index,
                        error_code=ErrorCode(p.error_code),
                        error_message=p.error_message,
                        current_leader=leader_cls(leader_id=p.leader_id, leader_epoch=p.leader_epoch),
                    )
                    for p in partitions
                ),
            )
            for topic_id, partitions in topics
        ),
        node_endpoints=(),
    )


def _check_share_acknowledge(version: int, correlation_id: int, topics: Any = (), **kwargs: Any) -> bytes:
    frame = encode_share_acknowledge_response(version, correlation_id, topics, **kwargs)
    _check_frame(frame, kio_share_acknowledge(version, topics, **kwargs), correlation_id)
    return frame


share_acknowledge_partitions = st.builds(
    ShareAcknowledgePartitionResult,
    index=int32,
    error_code=error_codes,
    leader_id=int32,
    leader_epoch=int32,
    error_message=messages,
)
share_acknowledge_topics = st.lists(
    st.tuples(topic_ids, st.lists(share_acknowledge_partitions, max_size=3)), max_size=3
)


@pytest.mark.parametrize("version", SHARE_ACKNOWLEDGE_VERSIONS)
@SETTINGS
@given(
    topics=share_acknowledge_topics,
    error_code=error_codes,
    error_message=messages,
    acquisition_lock_timeout_ms=int32,
    throttle_time_ms=int32,
    correlation_id=int32,
)
def test_share_acknowledge_matches_kio(version: int, topics: list, error_code: int, error_message: str | None,
                                       acquisition_lock_timeout_ms: int, throttle_time_ms: int,
                                       correlation_id: int) -> None:
    _check_share_acknowledge(version, correlation_id, topics, error_code=error_code, error_message=error_message,
                             acquisition_lock_timeout_ms=acquisition_lock_timeout_ms,
                             throttle_time_ms=throttle_time_ms)


def test_share_acknowledge_empty_and_lock_timeout_from_v2() -> None:
    v1 = _check_share_acknowledge(1, 7, acquisition_lock_timeout_ms=30_000)
    v2 = _check_share_acknowledge(2, 7, acquisition_lock_timeout_ms=30_000)
    assert v1.hex() == "0000000f" "00000007" "00" "00000000" "0000" "00" "01" "01" "00"
    assert v2.hex() == "00000013" "00000007" "00" "00000000" "0000" "00" "00007530" "01" "01" "00"


@pytest.mark.parametrize("version", SHARE_ACKNOWLEDGE_VERSIONS)
def test_share_acknowledge_examples(version: int) -> None:
    _check_share_acknowledge(version, 9, error_code=ErrorCode.invalid_share_session_epoch,
                             error_message="ShareAcknowledge cannot open a share session (epoch 0)")
    topics = [
        (TOPIC_A, [
            ShareAcknowledgePartitionResult(0, 0, 1, 0),
            ShareAcknowledgePartitionResult(1, int(ErrorCode.invalid_record_state), 1, 0, "bad state"),
            ShareAcknowledgePartitionResult(2, 0, 1, 0, ""),
        ]),
        (TOPIC_B, [ShareAcknowledgePartitionResult(i, 0, 1, 0) for i in range(200)]),
        (None, [ShareAcknowledgePartitionResult(0, 0, -1, -1, "x" * 17_000)]),
    ]
    topics += [(uuid.UUID(int=i + 100), []) for i in range(130)]
    _check_share_acknowledge(version, 10, topics, acquisition_lock_timeout_ms=15_000, throttle_time_ms=1,
                             error_message="é" * 100)


def test_share_acknowledge_rejects_unknown_versions() -> None:
    for version in (0, 3):
        with pytest.raises(ValueError):
            encode_share_acknowledge_response(version, 1)
