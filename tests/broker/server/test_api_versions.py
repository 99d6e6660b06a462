"""ApiVersions is derived from the handler registry: the group APIs of classic, KIP-848 consumer
and share groups and the offset APIs are advertised at Kafka 4.2's ranges."""

from __future__ import annotations

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.index import load_request_schema

from support import RawClient

from quafka.broker.server.handlers import advertised_ranges
from quafka.broker.server.registry import REGISTRY
from quafka.protocol import extensions
from quafka.protocol.framing import request_class



def test_api_versions_lists_exactly_the_registered_handlers(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert resp.error_code == 0
    advertised = sorted((k.api_key, k.min_version, k.max_version) for k in resp.api_keys)
    assert advertised == advertised_ranges()
    assert {k for k, _, _ in advertised} == set(REGISTRY)


def test_group_and_offset_apis_are_advertised_at_kafka_4_2_ranges(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(ApiVersionsRequestV0())
    keys = {k.api_key for k in resp.api_keys}
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[8] == (2, 10) and ranges[9] == (1, 10) and ranges[47] == (0, 0)  # Kafka 4.2 (KIP-896)
    assert ranges[11] == (0, 9) and ranges[14] == (0, 5) and ranges[12] == (0, 4) and ranges[13] == (0, 5)
    assert ranges[15] == (0, 6)
    assert ranges[68] == (0, 1) and ranges[69] == (0, 1)  # ConsumerGroupHeartbeat, ConsumerGroupDescribe
    # ListGroups, DeleteGroups, ShareGroupHeartbeat, ShareGroupDescribe and the share offset admin APIs
    assert {16, 42, 76, 77, 90, 91, 92} <= keys


def test_every_advertised_version_has_a_kio_schema():
    """Kafka's APIs have kio's schemas; quafka's API extension has its own (protocol/extensions.py),
    under keys far outside Kafka's range."""
    for key, lo, hi in advertised_ranges():
        for version in range(lo, hi + 1):
            if key in extensions.VERSION_RANGES:
                assert request_class(key, version) is extensions.REQUESTS[(key, version)]
                assert key >= 32000
            else:
                assert load_request_schema(key, version).__version__ == version


def test_the_quafka_api_extension_is_advertised(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(ApiVersionsRequestV0())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[extensions.QUAFKA_DESCRIBE_IN_FLIGHT] == (0, 0)
    assert ranges[extensions.QUAFKA_ALTER_IN_FLIGHT] == (0, 0)


def test_versions_clients_need_are_served():
    ranges = {k: (lo, hi) for k, lo, hi in advertised_ranges()}
    # librdkafka feature gates (wire-notes §2.4): MsgVer2 needs Produce >= 3 and Fetch >= 4,
    # ZSTD needs Produce >= 7 and Fetch >= 10; idempotence needs InitProducerId.
    assert ranges[0][0] <= 3 and ranges[0][1] >= 10
    assert ranges[1][0] <= 4 and ranges[1][1] >= 10
    assert 22 in ranges and 10 in ranges
    assert ranges[3] == (0, 13)
