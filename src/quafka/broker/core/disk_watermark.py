"""The free-space watermark of the log directory: when the broker stops taking produces to user
topics because the disk is nearly full, and when it takes them again (a quafka extension,
`quafka.log.dir.min.free.bytes` / `quafka.log.dir.min.free.percent`; docs/durability.md "A nearly
full disk").

Kafka has no such watermark: a full disk reaches it as an IOException of an append, which
`LogDirFailureChannel.maybeAddOfflineLogDir` turns into an offline log directory, and
`LogManager.handleLogDirFailure` halts the broker once no log directory is left — one directory,
as quafka has, means a broker that stops. quafka instead refuses produces (KAFKA_STORAGE_ERROR,
retriable) while the free space is below the watermark, so that what is already stored can still
be consumed and acknowledged: the space below the watermark is the reserve for the internal
topics' writes (`__share_group_state`, `__consumer_offsets`, the metadata journal, dead letters).

This module is the decision alone, pure (no I/O, no clock): the shell (`broker.server.disk_space`)
measures the file system with `os.statvfs` and feeds the numbers in; the machine says whether the
directory is below the watermark and whether that just started or just cleared (the shell logs
each transition once).

- The threshold is the larger of `min_free_bytes` and `min_free_percent` of the file system's
  size; 0 for both turns the watermark off (nothing is ever refused).
- The directory goes below when its free space drops under the threshold, and comes back only
  once the free space reaches the threshold plus a margin (`resume_margin`): 5 % of the
  threshold, at most `MAX_RESUME_MARGIN_BYTES`. Without it, a disk hovering at the threshold
  (a pruned state segment, another process's file) would flip between refusing and accepting
  every check, logging each flip.
"""

from __future__ import annotations

from typing import NamedTuple

MAX_RESUME_MARGIN_BYTES = 256 << 20


def threshold_bytes(total_bytes: int, min_free_bytes: int, min_free_percent: float) -> int:
    """The free space the log directory must keep: the larger of the two settings (0 = off)."""
    by_percent = int(total_bytes * min_free_percent / 100.0) if min_free_percent > 0 else 0
    return max(min_free_bytes, by_percent, 0)


def resume_margin(threshold: int) -> int:
    """How far above the threshold the free space must come back before produces resume."""
    return min(threshold // 20, MAX_RESUME_MARGIN_BYTES)


class Reading(NamedTuple):
    """One measurement of the log directory's file system."""

    free_bytes: int  # available to the broker (statvfs f_bavail * f_frsize)
    total_bytes: int  # the file system's size (f_blocks * f_frsize)


class Transition(NamedTuple):
    """The directory went below the watermark (`below` True) or came back above it."""

    below: bool
    free_bytes: int
    threshold_bytes: int  # the threshold in force at the transition
    resume_bytes: int  # free space at which produces resume (threshold + margin)


class DiskWatermark:
    """Whether the log directory is below its free-space watermark.

    `observe(reading, min_free_bytes, min_free_percent)` applies a measurement (the settings are
    passed each time: they are dynamic broker configs) and returns the Transition it caused, or
    None. `admits()` is what the produce path asks: True while produces are taken."""

    __slots__ = ("below", "free_bytes", "total_bytes", "threshold", "observations")

    def __init__(self) -> None:
        self.below = False
        self.free_bytes = -1  # unknown until the first observation
        self.total_bytes = -1
        self.threshold = 0
        self.observations = 0

    @property
    def resume_bytes(self) -> int:
        return self.threshold + resume_margin(self.threshold)

    def admits(self) -> bool:
        return not self.below

    def observe(self, reading: Reading, min_free_bytes: int, min_free_percent: float) -> Transition | None:
        self.observations += 1
        self.free_bytes, self.total_bytes = reading.free_bytes, reading.total_bytes
        self.threshold = threshold_bytes(reading.total_bytes, min_free_bytes, min_free_percent)
        if self.threshold <= 0:  # turned off (possibly while below: that clears it)
            below = False
        elif self.below:
            below = reading.free_bytes < self.resume_bytes
        else:
            below = reading.free_bytes < self.threshold
        if below == self.below:
            return None
        self.below = below
        return Transition(below, reading.free_bytes, self.threshold, self.resume_bytes)

    @property
    def measure_under(self) -> int:
        """The shell keeps an estimate of the free space (the last reading minus what it appended
        since); once the estimate is under this, it measures again before admitting more: the
        threshold while produces are admitted, -1 (never) when off or already below (the timed
        checks and the checks after deletions bring it back)."""
        return self.threshold if self.threshold > 0 and not self.below else -1
