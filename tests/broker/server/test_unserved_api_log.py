"""A request for an API the broker does not serve is logged once per client and API (issue 15):
the warning names the API, the client id and the client's software (from its ApiVersions), so a
user sees why that client gets nothing; repeats go to debug level. The connection is closed, as
Kafka closes it."""

from __future__ import annotations

import logging
import struct

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from support import RawClient

STREAMS_GROUP_HEARTBEAT = 88  # KIP-1071 streams groups: not served


def _unserved_request(raw: RawClient, client_id: bytes, api_key: int = STREAMS_GROUP_HEARTBEAT, version: int = 1) -> None:
    raw.send_frame(struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id + b"\x00" * 32)
    raw.sock.settimeout(10)
    assert raw.sock.recv(1) == b""  # closed


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "quafka.connection" and r.levelno >= logging.WARNING]


def test_an_unserved_api_is_warned_once_per_client_and_api(broker, caplog):
    caplog.set_level(logging.DEBUG, logger="quafka.connection")
    for _ in range(3):
        with RawClient(broker.bootstrap_servers) as raw:
            raw.request(ApiVersionsRequest(client_software_name="my-app", client_software_version="2.1"))
            _unserved_request(raw, b"worker-1")
    warned = _warnings(caplog)
    assert len(warned) == 1, warned
    assert "StreamsGroupHeartbeat (API key 88 version 1)" in warned[0] and "'worker-1'" in warned[0] and "my-app 2.1" in warned[0]
    assert "does not serve" in warned[0]
    repeats = [r for r in caplog.records if r.name == "quafka.connection" and r.levelno == logging.DEBUG
               and "StreamsGroupHeartbeat" in r.getMessage()]
    assert len(repeats) == 2

    with RawClient(broker.bootstrap_servers) as raw:  # another client: warned again
        _unserved_request(raw, b"worker-2")
    with RawClient(broker.bootstrap_servers) as raw:  # the same client, another API: warned again
        raw.request(ApiVersionsRequest(client_software_name="my-app", client_software_version="2.1"))
        _unserved_request(raw, b"worker-1", api_key=89, version=0)  # StreamsGroupDescribe
    warned = _warnings(caplog)
    assert len(warned) == 3, warned
    assert "'worker-2'" in warned[1] and "software not given" in warned[1]
    assert "StreamsGroupDescribe (API key 89 version 0)" in warned[2]
