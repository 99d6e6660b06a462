"""The hand-written ShareFetch request encoder writes exactly what kio's writer writes.

Random values mappings, as the client builds them (client/_share_session.py), are encoded both
ways: through the client's kio path (build_entity + kio's entity writer, request header v2) and
by encode_share_fetch_request; the frames must be byte-identical, for v1 and v2.
"""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from quafka.client._wire import build_entity
from quafka.protocol.framing import decode_request, request_class
from quafka.protocol.share_request_encoders import encode_share_fetch_request

int8 = st.integers(-128, 127)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
texts = st.none() | st.text(max_size=12)
uuids = st.none() | st.uuids().filter(lambda u: u.int != 0)

batches = st.fixed_dictionaries({"first_offset": int64, "last_offset": int64,
                                 "acknowledge_types": st.lists(int8, max_size=4)})
partitions = st.fixed_dictionaries({"partition_index": int32, "partition_max_bytes": st.just(0),
                                    "acknowledgement_batches": st.lists(batches, max_size=3)})
topics = st.fixed_dictionaries({"topic_id": uuids, "partitions": st.lists(partitions, max_size=3)})
forgotten = st.fixed_dictionaries({"topic_id": uuids, "partitions": st.lists(int32, max_size=4)})
share_fetch_values = st.fixed_dictionaries({
    "group_id": texts, "member_id": texts, "share_session_epoch": int32,
    "max_wait": st.integers(0, 2**31 - 1) | st.integers(0, 10**6).map(lambda ms: datetime.timedelta(milliseconds=ms)),
    "min_bytes": int32, "max_bytes": int32, "max_records": int32, "batch_size": int32,
    "share_acquire_mode": int8, "is_renew_ack": st.booleans(),
    "topics": st.lists(topics, max_size=3), "forgotten_topics_data": st.lists(forgotten, max_size=2)})


def kio_frame(version: int, correlation_id: int, client_id: str | None, values) -> bytes:
    entity = build_entity(request_class(78, version), values)
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(request_api_key=78, request_api_version=version,
                                                       correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(entity))(buffer, entity)
    body = buffer.getvalue()
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("version", [1, 2])
@settings(max_examples=200, deadline=None)
@given(values=share_fetch_values, correlation_id=st.integers(0, 2**31 - 1), client_id=texts)
def test_the_hand_written_share_fetch_request_is_kios_bytes(version, values, correlation_id, client_id):
    assert encode_share_fetch_request(version, correlation_id, client_id, values) == \
        kio_frame(version, correlation_id, client_id, values)


def test_the_broker_reads_what_the_encoder_writes():
    import uuid

    frame = encode_share_fetch_request(2, 9, "me", {
        "group_id": "g", "member_id": "m", "share_session_epoch": 3, "max_wait": 500, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 1, "batch_size": 1, "share_acquire_mode": 1, "is_renew_ack": False,
        "topics": [{"topic_id": uuid.UUID(int=7), "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 41, "last_offset": 41, "acknowledge_types": [1]}]}]}],
        "forgotten_topics_data": []})
    header, body = decode_request(frame[4:])
    assert (header.correlation_id, header.client_id) == (9, "me")
    assert body.max_wait == datetime.timedelta(milliseconds=500) and body.share_acquire_mode == 1
    batch = body.topics[0].partitions[0].acknowledgement_batches[0]
    assert (batch.first_offset, batch.last_offset, batch.acknowledge_types) == (41, 41, (1,))


def test_other_versions_are_refused():
    with pytest.raises(ValueError, match="v1 and v2"):
        encode_share_fetch_request(3, 1, None, {})
