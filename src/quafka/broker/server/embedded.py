"""EmbeddedBroker: a quafka broker in a background thread of this process (tests, examples, apps).

    with EmbeddedBroker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

It listens on a free loopback port unless `config` names `listeners`. `data_dir=None` means a
temporary directory that is removed on exit. `event_loop` is `quafka broker --event-loop`'s choice:
"auto" (uvloop where installed), "uvloop" or "asyncio".
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from typing import Mapping

from quafka.broker import config as cfg

from .event_loop import loop_factory
from .server import BrokerServer


class EmbeddedBroker:
    def __init__(self, data_dir: str | None = None, config: Mapping[str, object] | None = None,
                 event_loop: str = "auto") -> None:
        self._loop_factory = loop_factory(event_loop)[0]
        self._temp_dir: str | None = None
        if data_dir is None:
            self._temp_dir = tempfile.mkdtemp(prefix="quafka-")
            data_dir = self._temp_dir
        self.data_dir = data_dir
        props = {"listeners": "PLAINTEXT://127.0.0.1:0"}
        props.update({k: _render(v) for k, v in (config or {}).items()})
        props["log.dirs"] = data_dir
        self.config = cfg.BrokerConfig.from_props(props)
        self.server: BrokerServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self.server is None:
            raise RuntimeError("the broker is not running")
        host, port = self.server.state.advertised
        return f"{host}:{port}"

    def listener_address(self, listener_name: str) -> str:
        """host:port advertised for one listener (e.g. "SSL" next to "PLAINTEXT")."""
        if self.server is None:
            raise RuntimeError("the broker is not running")
        host, port = self.server.state.endpoint_for(listener_name.upper())
        return f"{host}:{port}"

    @property
    def port(self) -> int:
        return int(self.bootstrap_servers.rsplit(":", 1)[1])

    @property
    def metrics_port(self) -> int | None:
        """The port of the metrics listener (`metrics.listener`; None when it is off)."""
        if self.server is None:
            raise RuntimeError("the broker is not running")
        return self.server.metrics_port

    @property
    def metrics_url(self) -> str | None:
        """http://host:port/metrics of the metrics listener, None when it is off."""
        if self.server is None:
            raise RuntimeError("the broker is not running")
        if self.server.metrics_server is None:
            return None
        host = self.server.metrics_server.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.server.metrics_port}/metrics"

    def start(self) -> "EmbeddedBroker":
        self._thread = threading.Thread(target=self._run, name="quafka-broker", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = self._loop_factory()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = BrokerServer(self.config)
        await server.start()
        self.server = server
        self._ready.set()
        signalled = asyncio.ensure_future(self._stop.wait())
        stopped = asyncio.ensure_future(server.wait_stopped())  # it stops itself if its log directory fails
        await asyncio.wait((signalled, stopped), return_when=asyncio.FIRST_COMPLETED)
        signalled.cancel()
        stopped.cancel()
        await server.stop()

    def call(self, fn, *args):
        """Run `fn(*args)` on the broker's event loop thread and return its result (test helper)."""
        assert self._loop is not None

        async def run():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
