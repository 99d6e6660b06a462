"""Fuzzed TLS handshakes (issue 29, acceptance 3): bytes that are not TLS, truncated ClientHellos,
clients that stop mid-handshake, many of them at once. The broker closes each bad connection (at
the latest after quafka.ssl.handshake.timeout.ms), counts it, and keeps answering a good client
within a deadline. Randomized parts print their seed; rerun one with QUAFKA_SEED=<seed>."""

from __future__ import annotations

import asyncio
import os
import random
import ssl
import struct
import time

import pytest

from quafka.broker.server.embedded import EmbeddedBroker
from quafka.broker.server.metrics import render
from support.tls_certs import broker_ssl_config, make_certs

SEED = int(os.environ.get("QUAFKA_SEED", random.randrange(1 << 30)))
HANDSHAKE_TIMEOUT_MS = 500
GOOD_CLIENT_DEADLINE_S = 2.0


def _client_hello() -> bytes:
    """A real ClientHello, as a TLS client's first flight."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def _api_versions_request(correlation_id: int) -> bytes:
    client_id = b"tls-fuzz"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


async def _good_client(host: str, port: int, ca_pem: str, correlation_id: int) -> float:
    """A TLS client sends ApiVersions and reads the answer; returns how long it took (s)."""
    started = time.monotonic()
    ctx = ssl.create_default_context(cafile=ca_pem)
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost")
    writer.write(_api_versions_request(correlation_id))
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    frame = await reader.readexactly(size)
    assert struct.unpack_from(">i", frame, 0)[0] == correlation_id
    writer.close()
    return time.monotonic() - started


async def _bad_client(host: str, port: int, payload: bytes, close_after: bool) -> float:
    """Send `payload`, then close or stall; returns when the broker closed the connection (s)."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    if payload:
        writer.write(payload)
    if close_after:
        writer.close()
        return 0.0
    try:
        while await asyncio.wait_for(reader.read(4096), HANDSHAKE_TIMEOUT_MS / 1000 + 5):
            pass  # an alert, then EOF
    except (ConnectionError, OSError):
        pass
    writer.close()
    return time.monotonic() - started


def _bad_payloads(rng: random.Random, hello: bytes, n: int) -> list[tuple[str, bytes, bool]]:
    kinds = []
    for i in range(n):
        kind = rng.choice(["garbage", "truncated", "silent", "truncated-close", "bit-flip", "kafka-frame"])
        if kind == "garbage":
            payload = rng.randbytes(rng.randrange(1, 2000))
        elif kind in ("truncated", "truncated-close"):
            payload = hello[:rng.randrange(1, len(hello))]
        elif kind == "silent":
            payload = b""
        elif kind == "bit-flip":
            flipped = bytearray(hello)
            for _ in range(rng.randrange(1, 8)):
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            payload = bytes(flipped)
        else:  # a PLAINTEXT Kafka client at the TLS port
            payload = _api_versions_request(i)
        kinds.append((kind, payload, kind == "truncated-close"))
    return kinds


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_bad_handshakes_never_disturb_a_good_client(tmp_path, event_loop):
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    certs = make_certs(tmp_path)
    hello = _client_hello()
    config = broker_ssl_config(certs, **{"quafka.ssl.handshake.timeout.ms": HANDSHAKE_TIMEOUT_MS})
    with EmbeddedBroker(config=config, event_loop=event_loop) as broker:
        host, port_text = broker.listener_address("SSL").rsplit(":", 1)
        port = int(port_text)
        bad = _bad_payloads(rng, hello, 60)

        async def run() -> tuple[list[float], list[float]]:
            bad_tasks = [asyncio.create_task(_bad_client(host, port, payload, close))
                         for _, payload, close in bad]
            await asyncio.sleep(0.05)  # the bad ones are connected and waiting
            good = []
            for i in range(5):
                good.append(await asyncio.wait_for(_good_client(host, port, certs.ca_pem, 100 + i),
                                                   GOOD_CLIENT_DEADLINE_S))
            closed = await asyncio.gather(*bad_tasks)
            return good, closed

        good, closed = asyncio.run(run())
        assert max(good) < GOOD_CLIENT_DEADLINE_S, good
        # every stalled connection was closed by the broker, at the latest by the handshake timeout
        assert max(closed) < HANDSHAKE_TIMEOUT_MS / 1000 + 3, closed
        failures = broker.server.metrics.tls_handshake_failures
        print("failures by reason:", failures)
        stalled = sum(1 for kind, _, _ in bad if kind in ("silent", "truncated"))
        assert sum(n for (_, reason), n in failures.items() if reason == "timeout") >= stalled
        assert sum(failures.values()) >= len(bad) - sum(1 for kind, _, _ in bad if kind == "truncated-close")
        # the broker is still whole: no handshake left behind, the PLAINTEXT listener answers
        deadline = time.monotonic() + 5
        while broker.call(lambda: len(broker.server.tls_listeners["SSL"].handshakes)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.call(lambda: len(broker.server.tls_listeners["SSL"].handshakes)) == 0
        assert broker.server.metrics.tls_handshakes["SSL"] == 5
        exposition = broker.call(lambda: render(broker.server))
        assert 'quafka_tls_handshakes_total{listener="SSL"} 5' in exposition
        assert 'quafka_tls_handshake_failures_total{listener="SSL",reason="timeout"}' in exposition
