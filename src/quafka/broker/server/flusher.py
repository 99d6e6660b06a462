"""fsync off the event loop: the broker's one path to durable log data.

A flush is taken on the loop (`Log.begin_flush`: which descriptors, up to which offset; the log's
unflushed count starts again from zero), synced on a worker thread (`FlushTicket.run`), and
published back on the loop (`Log.complete_flush`: `flushed_offset` moves up). Appends go on
meanwhile; nothing the worker touches is shared with the loop (it syncs duplicated descriptors).

One flush per log runs at a time; callers that need an offset durable wait for the flush in
flight and start another if it did not cover them (`flush(log, end_offset)`). Memory logs have
nothing to sync: their tickets complete inline, so a simulated broker stays single-threaded.

Two worker threads sync: one for the internal logs (`__share_group_state`, `__consumer_offsets`
and the other `__` topics), one for the data logs. With one thread, an acknowledgement's state write
waited behind the fsyncs of every data log (a large produce's sync, the background flush loop)
although it needs only its own small sync; Kafka's share coordinator likewise writes through its
own coordinator runtime, not behind the partitions' log flushes.

A sync that fails takes the log directory offline (`LogDirHealth.fail`): every waiter gets the
error, the failure is counted (`flush_failures`) and logged, and the broker handles it as Kafka
handles a failed log directory (server.BrokerServer.on_log_dir_failure).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from quafka.broker.storage import FlushTicket, Log

from .metrics import WRITE_BUCKETS_MS, Histogram

log = logging.getLogger("quafka.flush")

__all__ = ["LogFlusher"]


class LogFlusher:
    def __init__(self) -> None:
        self._executors: dict[bool, ThreadPoolExecutor] = {}  # internal log? -> its worker thread
        self._in_flight: dict[Log, asyncio.Task] = {}
        self.flush_time_ms = Histogram(WRITE_BUCKETS_MS)  # completed flushes (LogFlushRateAndTimeMs)
        self.flush_failures = 0

    async def flush(self, plog: Log, end_offset: int | None = None) -> None:
        """Return once everything below `end_offset` (default: the log end now) is fsynced.
        Raises the OSError of a failed sync (the log directory is then offline)."""
        target = plog.log_end_offset if end_offset is None else end_offset
        while plog.flushed_offset < target:
            pending = self._in_flight.get(plog)
            if pending is None:
                ticket = plog.begin_flush()
                if ticket is None:  # nothing unflushed: closed, or covered by what completed
                    return
                pending = self._start(plog, ticket)
            await asyncio.shield(pending)

    def flush_in_background(self, plog: Log) -> None:
        """Start a flush of everything appended so far unless one is running (the flush loop)."""
        if plog in self._in_flight:
            return
        ticket = plog.begin_flush()
        if ticket is not None:
            self._start(plog, ticket)

    def _start(self, plog: Log, ticket: FlushTicket) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self._run(plog, ticket), name=f"flush {plog.topic}-{plog.partition}")
        self._in_flight[plog] = task
        task.add_done_callback(_consume_exception)
        return task

    async def _run(self, plog: Log, ticket: FlushTicket) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            if ticket.blocking:
                await loop.run_in_executor(self._executor_for(plog), ticket.run)
            else:
                ticket.run()
        except OSError as exc:
            self.flush_failures += 1
            log.error("fsync of %s-%d failed: %s", plog.topic, plog.partition, exc)
            plog.health.fail(exc, f"fsync of {plog.topic}-{plog.partition}")
            raise
        finally:
            if self._in_flight.get(plog) is asyncio.current_task():
                del self._in_flight[plog]
        plog.complete_flush(ticket)
        self.flush_time_ms.observe((loop.time() - started) * 1000.0)

    def _executor_for(self, plog: Log) -> ThreadPoolExecutor:
        internal = plog.topic.startswith("__")
        executor = self._executors.get(internal)
        if executor is None:
            name = "quafka-fsync-internal" if internal else "quafka-fsync-data"
            executor = self._executors[internal] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        return executor

    async def close(self) -> None:
        """Wait for the flushes in flight (their failures are already handled), stop the workers."""
        if self._in_flight:
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)
        for executor in self._executors.values():
            executor.shutdown(wait=True)
        self._executors.clear()


def _consume_exception(task: asyncio.Task) -> None:
    """A background flush nobody awaits: its failure was logged and handled in `_run`."""
    if not task.cancelled():
        task.exception()
