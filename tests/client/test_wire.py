"""The sans-I/O wire core, without sockets: frames checked against quafka's broker-side decoder,
responses built with kio's writer (through quafka.protocol.framing.encode_response)."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.metadata.v8.request import MetadataRequest as MetadataRequestV8
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse

from quafka.client._wire import WireConnection, WireError, build_entity, kio_version_range, request_class
from quafka.protocol.errors import ErrorCode
from quafka.protocol.framing import api_versions_fallback_response, decode_request, encode_response


def _metadata_v12() -> MetadataRequest:
    return MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="t"),),
                           allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _metadata_response() -> MetadataResponse:
    return MetadataResponse(throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c", controller_id=1,
                            topics=())


def test_send_frames_a_flexible_request_with_header_v2_and_increasing_correlation_ids():
    wire = WireConnection("my-client")
    first_id, first = wire.send(_metadata_v12())
    second_id, second = wire.send(_metadata_v12())
    assert (first_id, second_id) == (0, 1)
    assert int.from_bytes(first[:4], "big") == len(first) - 4
    header, body = decode_request(second[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (3, 12, 1)
    assert header.client_id == "my-client"
    assert type(header).__flexible__ and body == _metadata_v12()
    assert [f.correlation_id for f in wire.in_flight] == [0, 1]


def test_send_uses_request_header_v1_for_a_non_flexible_version():
    wire = WireConnection("c")
    request = MetadataRequestV8(topics=None, allow_auto_topic_creation=False,
                                include_cluster_authorized_operations=False,
                                include_topic_authorized_operations=False)
    _, frame = wire.send(request)
    header, body = decode_request(frame[4:])
    assert not type(header).__flexible__ and header.client_id == "c"
    assert body == request
    # header v1: key, version, correlation id, client id (int16 length + bytes), then the body directly
    assert frame[4:19] == b"\x00\x03\x00\x08\x00\x00\x00\x00\x00\x01c\xff\xff\xff\xff"


def test_receive_bytes_returns_responses_in_order_even_when_fed_one_byte_at_a_time():
    wire = WireConnection("c")
    wire.send(_metadata_v12())
    wire.send(_metadata_v12())
    data = encode_response(0, _metadata_response()) + encode_response(1, _metadata_response())
    completed = []
    for i in range(len(data)):
        completed += wire.receive_bytes(data[i : i + 1])
    assert completed == [(0, _metadata_response()), (1, _metadata_response())]
    assert wire.in_flight == ()


def test_api_versions_response_uses_header_v0_and_decodes():
    wire = WireConnection("c")
    correlation_id, _ = wire.send(ApiVersionsRequest(client_software_name="quafka", client_software_version="1"))
    response = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(ApiVersion(api_key=1, min_version=4,
                                   max_version=17),), throttle_time=datetime.timedelta(0))
    frame = encode_response(correlation_id, response)
    assert frame[8:10] == b"\x00\x00"  # the error code follows the int32 correlation id: header v0
    assert wire.receive_bytes(frame) == [(correlation_id, response)]


def test_api_versions_unsupported_version_reply_is_decoded_in_the_v0_format():
    wire = WireConnection("c")
    correlation_id, _ = wire.send(ApiVersionsRequest(client_software_name="q", client_software_version="1"))
    [(cid, body)] = wire.receive_bytes(api_versions_fallback_response(correlation_id, [(18, 0, 2)]))
    assert cid == correlation_id and isinstance(body, ApiVersionsResponseV0)
    assert body.error_code == ErrorCode.unsupported_version and body.api_keys[0].max_version == 2


def test_a_correlation_id_out_of_order_is_a_wire_error_naming_both():
    wire = WireConnection("c")
    wire.send(_metadata_v12())
    with pytest.raises(WireError, match="correlation id 7 does not match.*correlation id 0"):
        wire.receive_bytes(encode_response(7, _metadata_response()))


def test_a_response_without_a_request_is_a_wire_error():
    with pytest.raises(WireError, match="no request is in flight"):
        WireConnection("c").receive_bytes(encode_response(0, _metadata_response()))


def test_fail_all_returns_every_in_flight_request():
    wire = WireConnection("c")
    wire.send(_metadata_v12())
    wire.send(_metadata_v12())
    assert [f.correlation_id for f in wire.fail_all()] == [0, 1]
    assert wire.in_flight == ()


def test_build_entity_builds_nested_entities_and_drops_fields_a_version_lacks():
    values = {"topics": [{"name": "t", "topic_id": None}], "allow_auto_topic_creation": False,
              "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
    assert build_entity(request_class(3, 12), values) == _metadata_v12()
    v4 = build_entity(request_class(3, 4), values)
    assert v4.topics[0].name == "t" and not hasattr(v4.topics[0], "topic_id")


def test_kio_version_range():
    assert kio_version_range(18)[0] == 0 and kio_version_range(1)[1] >= 17


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_large_frame_is_collected_in_pieces_and_frames_around_it_still_decode(monkeypatch, seed):
    """A frame of at least _LARGE_FRAME_BYTES (lowered here so that small responses take that
    path) is kept as the pieces received and joined once; frames before and after it in the same
    reads, and reads cut anywhere (a random cut of the stream, seed printed), decode as before."""
    import random

    from quafka.client import _wire

    monkeypatch.setattr(_wire, "_LARGE_FRAME_BYTES", 16)
    print(f"seed {seed}")
    rng = random.Random(seed)
    wire = WireConnection("c")
    responses = []
    for i in range(6):
        wire.send(_metadata_v12())
        responses.append(MetadataResponse(throttle_time=datetime.timedelta(0), brokers=(),
                                          cluster_id="c" * rng.randrange(1, 400), controller_id=i, topics=()))
    data = b"".join(encode_response(i, r) for i, r in enumerate(responses))
    completed, pos = [], 0
    while pos < len(data):
        step = rng.choice([1, 3, 7, 40, 300, 1000])
        chunk = data[pos : pos + step]
        completed += wire.receive_bytes(bytearray(chunk) if rng.random() < 0.3 else chunk)
        pos += step
    assert completed == list(enumerate(responses))
    assert wire.in_flight == () and wire._missing == 0 and not wire._pieces and not wire._buffer
