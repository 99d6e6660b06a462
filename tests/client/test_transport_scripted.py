"""BrokerConnection against scripted asyncio servers (no broker), and the sync layer's LoopThread."""

from __future__ import annotations

import asyncio
import signal

import pytest
from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse

from quafka.client._sync import LoopThread
from quafka.client._transport import BrokerConnection
from quafka.client.errors import KafkaConnectionError
from quafka.protocol.errors import ErrorCode
from quafka.protocol.framing import api_versions_fallback_response, decode_request, encode_response


async def _read_request(reader: asyncio.StreamReader):
    size = int.from_bytes(await reader.readexactly(4), "big")
    return decode_request(await reader.readexactly(size))


async def _serve(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_api_versions_falls_back_to_v0_when_the_broker_answers_unsupported_version():
    seen_versions = []

    async def handler(reader, writer):
        header, _ = await _read_request(reader)
        seen_versions.append(header.request_api_version)
        writer.write(api_versions_fallback_response(header.correlation_id, [(18, 0, 2), (3, 0, 12)]))
        header, _ = await _read_request(reader)
        seen_versions.append(header.request_api_version)
        body = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(
            ApiVersion(api_key=18, min_version=0, max_version=2), ApiVersion(api_key=3, min_version=0, max_version=12)))
        writer.write(encode_response(header.correlation_id, body))
        await writer.drain()
        await reader.read()  # until the client closes

    async def main():
        server, port = await _serve(handler)
        async with server:
            conn = await BrokerConnection("127.0.0.1", port, "t").connect()
            assert conn.api_versions == {18: (0, 2), 3: (0, 12)}
            assert conn.version_for(3) == 12
            await conn.close()

    asyncio.run(main())
    assert seen_versions == [3, 0]


def test_undecodable_bytes_fail_pending_requests_and_name_the_broker():
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(b"\x00\x00\x00\x08" + b"\x7f\x00\x00\x00" + b"\x00\x00\x00\x00")  # wrong correlation id
        await writer.drain()
        await reader.read()

    async def main():
        server, port = await _serve(handler)
        async with server:
            conn = BrokerConnection("127.0.0.1", port, "t")
            with pytest.raises(KafkaConnectionError, match=rf"127.0.0.1:{port} sent bytes that cannot be decoded"):
                await conn.connect()

    asyncio.run(main())


def test_a_broker_that_closes_the_connection_fails_the_pending_request_retriably():
    async def handler(reader, writer):
        await _read_request(reader)
        writer.close()

    async def main():
        server, port = await _serve(handler)
        async with server:
            with pytest.raises(KafkaConnectionError, match="closed by the broker") as info:
                await BrokerConnection("127.0.0.1", port, "t").connect()
            assert info.value.retriable

    asyncio.run(main())


def test_loop_thread_runs_coroutines_reraises_their_errors_and_steps_async_generators():
    loop = LoopThread("test-loop")
    try:
        async def add(a, b):
            return a + b

        async def fail():
            raise KeyError("x")

        async def numbers():
            for i in range(3):
                yield i

        assert loop.run(add(1, 2)) == 3
        with pytest.raises(KeyError):
            loop.run(fail())
        assert list(loop.iterate(numbers())) == [0, 1, 2]

        async def from_inside():
            return loop.run(add(1, 1))

        with pytest.raises(RuntimeError, match="own event loop thread"):
            loop.run(from_inside())
    finally:
        loop.close()
    assert loop.closed


def test_an_interrupted_sync_iteration_cancels_the_pending_step_and_closes_the_async_generator():
    """A wait interrupted in the calling thread (Ctrl-C, a test timeout) must not leave the step
    running on the loop: ``iterate`` used to fail with "aclose(): asynchronous generator is already
    running" and leave the generator open."""
    loop = LoopThread("test-loop")
    cleaned = []

    async def one_then_forever():
        try:
            yield 1
            await asyncio.Event().wait()
            yield 2
        finally:
            cleaned.append(True)

    def interrupt(signum, frame):
        raise TimeoutError("interrupted")

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        iterator = loop.iterate(one_then_forever())
        assert next(iterator) == 1
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(TimeoutError, match="interrupted"):
            next(iterator)
        assert cleaned == [True]
        assert loop.run(asyncio.sleep(0, result="still serving")) == "still serving"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        loop.close()
