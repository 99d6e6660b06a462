"""The flusher's worker threads (issue 28, item 7): an internal log's fsync (an acknowledgement's
`__share_group_state` write) never waits behind a data log's. Real FileLogs and real fsyncs; the
data log's sync is held on its thread until the internal log's flush has completed."""

from __future__ import annotations

import asyncio
import threading

from quafka.broker.server.flusher import LogFlusher
from quafka.broker.storage import FileLog, LogConfig
from quafka.broker.storage import file_log as file_log_module
from quafka.protocol.record_batch import build_batch, read_header


def _appended(tmp_path, topic: str) -> FileLog:
    (tmp_path / topic).mkdir()
    log = FileLog(str(tmp_path / topic), topic, 0, LogConfig(), now_ms=0)
    buf = bytearray(build_batch([(b"k", b"v")], base_timestamp=1))
    log.append(buf, [(0, read_header(buf))], now_ms=1, defer_flush=True)
    return log


def test_an_internal_log_flush_does_not_wait_behind_a_data_log_flush(tmp_path, monkeypatch):
    data, state = _appended(tmp_path, "jobs"), _appended(tmp_path, "__share_group_state")
    real = file_log_module._sync_data
    data_sync_started, release_data_sync = threading.Event(), threading.Event()
    threads: dict[str, str] = {}

    def sync(fd: int) -> None:
        name = threading.current_thread().name
        threads.setdefault("data" if "data" in name else "internal", name)
        if "data" in name:
            data_sync_started.set()
            assert release_data_sync.wait(10), "the data log's sync was never released"
        real(fd)

    monkeypatch.setattr(file_log_module, "_sync_data", sync)

    async def scenario() -> None:
        flusher = LogFlusher()
        data_flush = asyncio.ensure_future(flusher.flush(data))
        await asyncio.get_running_loop().run_in_executor(None, data_sync_started.wait, 10)
        # the data log's fsync is held on its thread; the state log's flush completes anyway
        await asyncio.wait_for(flusher.flush(state), 10)
        assert state.flushed_offset == state.log_end_offset == 1
        assert not data_flush.done() and data.flushed_offset == 0
        release_data_sync.set()
        await asyncio.wait_for(data_flush, 10)
        assert data.flushed_offset == 1
        await flusher.close()

    try:
        asyncio.run(scenario())
    finally:
        release_data_sync.set()
        data.close()
        state.close()
    assert threads["data"].startswith("quafka-fsync-data") and threads["internal"].startswith("quafka-fsync-internal")
