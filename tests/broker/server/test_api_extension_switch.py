"""`quafka.api.extension.enable=false`: the broker neither advertises nor serves quafka's API
extension (keys 32000/32001), so clients meet it as they meet Apache Kafka — ApiVersions without
the keys, a request for them treated as an unknown API key (the connection closed, as Kafka's
SocketServer closes it on a header it cannot parse), and quafka's Admin raising
ExtensionUnavailable before sending anything. Kafka's own APIs are untouched."""

from __future__ import annotations

import re

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from quafka.broker import config as cfg
from quafka.broker.server.embedded import EmbeddedBroker
from quafka.broker.server.handlers import advertised_ranges
from quafka.client import Admin, ExtensionUnavailable
from quafka.protocol.extensions import QUAFKA_ALTER_IN_FLIGHT, QUAFKA_DESCRIBE_IN_FLIGHT, QuafkaDescribeInFlightRequest
from support import RawClient

pytestmark = pytest.mark.timeout(60)

EXTENSION = {QUAFKA_DESCRIBE_IN_FLIGHT, QUAFKA_ALTER_IN_FLIGHT}


@pytest.fixture(scope="module")
def plain():
    with EmbeddedBroker(config={"quafka.api.extension.enable": False}) as broker:
        yield broker


def test_api_versions_lists_every_kafka_api_and_not_the_extension(plain):
    with RawClient(plain.bootstrap_servers) as raw:
        resp = raw.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    advertised = sorted((k.api_key, k.min_version, k.max_version) for k in resp.api_keys)
    assert advertised == [r for r in advertised_ranges() if r[0] not in EXTENSION]
    assert len(advertised) == len(advertised_ranges()) - 2


def describe_in_flight_frame(raw: RawClient) -> bytes:
    return raw.encode(QuafkaDescribeInFlightRequest(group_id="g", topics=(), offset=-1, max_rows=10))


def test_a_request_for_the_extension_closes_the_connection_as_an_unknown_api(plain, broker):
    with RawClient(broker.bootstrap_servers) as raw:  # the same request is answered when the extension is on
        raw.send_frame(describe_in_flight_frame(raw))
        assert len(raw.recv_frame()) > 4
    with RawClient(plain.bootstrap_servers) as raw:
        raw.send_frame(describe_in_flight_frame(raw))
        raw.sock.settimeout(10)
        assert raw.sock.recv(1) == b""  # closed, no answer


def test_the_admin_says_a_quafka_broker_is_needed(plain):
    with Admin({"bootstrap.servers": plain.bootstrap_servers}) as admin:
        admin.create_topics({"t": (1, 1)})  # Kafka's APIs are served as ever
        with pytest.raises(ExtensionUnavailable) as describe:
            admin.describe_in_flight("g")
        with pytest.raises(ExtensionUnavailable) as alter:
            admin.alter_in_flight("g", "t", 0, "release", first_offset=0, last_offset=0)
    for raised, what in ((describe, "describing in-flight records"), (alter, "a force release")):
        assert re.match(rf"{what}.* needs a quafka broker: the broker at 127\.0\.0\.1:\d+ does not serve quafka's API "
                        r"extension", str(raised.value.args[0])), raised.value


def test_the_key_is_a_boolean():
    with pytest.raises(cfg.ConfigError, match="quafka.api.extension.enable"):
        cfg.BrokerConfig.from_props({"quafka.api.extension.enable": "maybe"})
    assert cfg.BrokerConfig.from_props({}).get("quafka.api.extension.enable") is True
