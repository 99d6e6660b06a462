"""Free space of the log directory, measured cheaply, and the produce refusal below the watermark
(`quafka.log.dir.min.free.bytes` / `quafka.log.dir.min.free.percent`; the decision is
`broker.core.disk_watermark`, docs/durability.md "A nearly full disk").

Measuring: one `os.statvfs` of the log directory every `CHECK_INTERVAL_MS`, at once after space
was freed (a topic deleted, retention or DeleteRecords removed segments: `recheck`), at the next
produce after the dynamic broker configs changed, and when the running estimate says the
threshold is near. Between two measurements the estimate is the last
free space minus the bytes this broker appended to user topics since, so the produce path costs
an integer comparison, not a system call; writes the estimate does not see (internal topics,
other processes) are caught by the next timed check.

Refusing: `admit(nbytes)` is asked by the Produce handler for each partition of a request before
its append; below the watermark it returns the error message (KAFKA_STORAGE_ERROR, which Kafka
clients retry: Kafka's `KafkaStorageException` is an `InvalidMetadataException`, a
`RetriableException`, and librdkafka's `rd_kafka_handle_Produce_error` retries it as
"not persisted"). A produce that starts above the threshold is taken whole, so the free space
may end up to one request's batches below it: the reserve absorbs that. Only user produces ask:
the internal topics, the metadata journal and dead-letter writes (which complete an
acknowledgement already made, one per given-up record) go on below the watermark, drawing on the
reserve. When the reserve runs out too, the write meets ENOSPC and the log directory goes offline
as any storage failure does (`BrokerServer.on_log_dir_failure`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Callable

from quafka.broker._config_types import BrokerSettings
from quafka.broker.core.disk_watermark import DiskWatermark, Reading, Transition

log = logging.getLogger("quafka.server.disk_space")

CHECK_INTERVAL_MS = 1000
MIN_FREE_BYTES = "quafka.log.dir.min.free.bytes"
MIN_FREE_PERCENT = "quafka.log.dir.min.free.percent"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class DiskSpaceMonitor:
    """The free-space watermark of one log directory (`path`; None for a memory broker, which is
    never refused). `config()` returns the broker configuration in force (a new object whenever
    dynamic configs change: the produce path then measures again at once)."""

    def __init__(self, path: str | None, config: Callable[[], BrokerSettings], *,
                 statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> None:
        self.path = path
        self._config = config
        self._config_seen: BrokerSettings | None = None
        self._statvfs = statvfs
        self.watermark = DiskWatermark()
        self.estimated_free_bytes = 0
        self._measure_under = -1  # watermark.measure_under as of the last check
        self.refusals = 0  # partition produces refused below the watermark
        self.checks = 0
        self._check_error: OSError | None = None

    @property
    def below(self) -> bool:
        return self.watermark.below

    # ------------------------------------------------------------------ measuring
    def check(self) -> Transition | None:
        """Measure the file system now and apply it; log a transition (once each way)."""
        if self.path is None:
            return None
        config = self._config_seen = self._config()  # seen even if the measurement fails: no retry per produce
        try:
            st = self._statvfs(self.path)
        except OSError as exc:
            if self._check_error is None:
                log.warning("cannot measure the free space of log directory %s (%s); the free-space watermark "
                            "keeps its last state (%s) until it can", self.path, exc,
                            "below: produces refused" if self.below else "produces accepted")
            self._check_error = exc
            return None
        if self._check_error is not None:
            log.info("the free space of log directory %s can be measured again", self.path)
            self._check_error = None
        self.checks += 1
        reading = Reading(st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)
        min_bytes, min_percent = int(config.get(MIN_FREE_BYTES)), float(config.get(MIN_FREE_PERCENT))
        transition = self.watermark.observe(reading, min_bytes, min_percent)
        self.estimated_free_bytes = reading.free_bytes
        self._measure_under = self.watermark.measure_under
        if transition is not None:
            self._log_transition(transition, min_bytes, min_percent, reading.total_bytes)
        return transition

    recheck = check  # after space was freed: measure at once rather than at the next interval

    def measured_bytes(self) -> tuple[int, int]:
        """(total, usable) bytes of the log directory's file system, measured now (DescribeLogDirs
        v4+, as Kafka's `FileStore.getTotalSpace`/`getUsableSpace`; the measurement also feeds the
        watermark); (-1, -1) for a memory store or when it cannot be measured (check logs why)."""
        if self.path is None:
            return -1, -1
        self.check()
        if self._check_error is not None:
            return -1, -1
        return self.watermark.total_bytes, self.watermark.free_bytes

    def _log_transition(self, t: Transition, min_bytes: int, min_percent: float, total: int) -> None:
        settings = f"{MIN_FREE_BYTES}={min_bytes}, {MIN_FREE_PERCENT}={min_percent:g} of {total} bytes"
        if t.below:
            log.warning(
                "log directory %s has %d bytes free (%s), below the free-space watermark of %d bytes (%s; %s): "
                "produces to user topics are refused with KAFKA_STORAGE_ERROR (retriable) until %d bytes are "
                "free again; fetches, share groups and acknowledgements go on (internal topics write into the "
                "reserve below the watermark). Free space (retention, delete topics or records, grow the file system) and produces "
                "resume by themselves.",
                self.path, t.free_bytes, _mib(t.free_bytes), t.threshold_bytes, _mib(t.threshold_bytes),
                settings, t.resume_bytes)
        else:
            log.info("log directory %s has %d bytes free (%s) again, above the free-space watermark of %d "
                     "bytes (%s): produces are accepted again", self.path, t.free_bytes, _mib(t.free_bytes),
                     t.threshold_bytes, settings)

    async def run(self, stopped: Callable[[], bool]) -> None:
        """Measure every CHECK_INTERVAL_MS until `stopped()` (the broker's background task)."""
        while not stopped():
            await asyncio.sleep(CHECK_INTERVAL_MS / 1000.0)
            if stopped():
                return
            try:
                self.check()
            except Exception:  # a bug: keep the broker (and the last state), say so, try again
                log.exception("the free-space check of log directory %s failed", self.path)

    # ------------------------------------------------------------------ the produce path
    def admit(self, nbytes: int) -> str | None:
        """None when a user produce of `nbytes` may be appended (and counts it in the estimate);
        otherwise the refusal message."""
        if self.path is None:
            return None
        if self.estimated_free_bytes < self._measure_under or self._config() is not self._config_seen:
            self.check()
        if self.watermark.below:
            self.refusals += 1
            return self.refusal_message()
        self.estimated_free_bytes -= nbytes
        return None

    def refusal_message(self) -> str:
        w = self.watermark
        return (f"Log directory {self.path} is below its free-space watermark ({w.free_bytes} bytes free, "
                f"{MIN_FREE_BYTES}/{MIN_FREE_PERCENT} ask for {w.threshold}): produces are refused until "
                f"{w.resume_bytes} bytes are free; retry later")
