#!/usr/bin/env python3
"""The echo floor: the CPU a bare asyncio server spends per request/response on this machine — the
yardstick of the job-queue goal (broker CPU per one-at-a-time job ≤ 3× this).

A server child process (asyncio streams, as the broker's connections are: read a 4-byte size, read
the frame, write a 16-byte answer) and one client sending `--requests` requests one at a time over
loopback, each waiting for its answer, like a consumer at max.poll.records=1. Printed: the
server's CPU (utime + stime from /proc) per request, and the round trips per second. Compare the
broker's µs per record of `benchmarks/share_jobs.py` at one consumer, max.poll.records=1 (one
ShareFetch per record, its acknowledgement riding on the next one).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import arg_parser, free_port, port_open, process_cpu_seconds  # noqa: E402

REQUEST = b"\0" * 100  # about a one-record ShareFetch with an acknowledgement on it
ANSWER = b"\0" * 16


async def _serve(port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                await reader.readexactly(size)
                writer.write(struct.pack(">i", len(ANSWER)) + ANSWER)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the echo server closed the connection")
        data += chunk
    return data


def run_loop(main_coro, loop: str) -> None:
    """Run `main_coro` on asyncio's standard loop ("asyncio") or uvloop's ("uvloop")."""
    if loop == "uvloop":
        import uvloop

        uvloop.run(main_coro)
    else:
        asyncio.run(main_coro)


def measure(loop: str = "asyncio", requests: int = 20_000, on_start=None) -> tuple[float, float]:
    """(µs of server CPU per request/response, round trips per second) of an echo server on `loop`;
    `on_start(pid)` is called with the server's pid once it runs (job_round.py pins it to a CPU)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), loop])
    if on_start is not None:
        on_start(server.pid)
    try:
        deadline = time.monotonic() + 10
        while not port_open(port):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"the echo server ({loop}) did not start")
            time.sleep(0.02)
        frame = struct.pack(">i", len(REQUEST)) + REQUEST
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(1000):  # warm up
                sock.sendall(frame)
                _recv_exactly(sock, 4 + len(ANSWER))
            cpu0, t0 = process_cpu_seconds(server.pid), time.monotonic()
            for _ in range(requests):
                sock.sendall(frame)
                _recv_exactly(sock, 4 + len(ANSWER))
            wall, cpu = time.monotonic() - t0, process_cpu_seconds(server.pid) - cpu0
    finally:
        server.terminate()
        server.wait(10)
    return cpu / requests * 1e6, requests / wall


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) in (3, 4) and sys.argv[1] == "--serve":
        run_loop(_serve(int(sys.argv[2])), sys.argv[3] if len(sys.argv) == 4 else "asyncio")
        return 0
    parser = arg_parser(__doc__)
    parser.add_argument("--requests", type=int, default=20_000, help="round trips to time (default 20,000)")
    parser.add_argument("--loop", choices=["asyncio", "uvloop", "both"], default="both",
                        help="the server's event loop (default both, one after the other)")
    args = parser.parse_args(argv)
    for loop in (["asyncio", "uvloop"] if args.loop == "both" else [args.loop]):
        us, rate = measure(loop, args.requests)
        print(f"echo floor ({loop}): {us:.1f} µs of server CPU per request/response, "
              f"{rate:,.0f} round trips/s ({args.requests:,} requests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
