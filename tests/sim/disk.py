"""The simulated durable store: partition logs and the metadata journal that outlive a broker.

`SimDisk` is what survives a crash: for each partition log its stored batches (as bytes, base
offsets stamped), a possibly torn tail, the log start offset checkpoint; and the metadata
journal. A broker incarnation opens it through `SimLogStore` (in-memory `SimLog`s rebuilt from
the stored batches, with recovery: the tail is cut at the first incomplete, corrupt or
out-of-sequence batch, as FileLog's recovery of the active segment does) and `SimMetadataStore`
(the journal replayed into a fresh `ClusterMetadata`).

What a crash keeps is decided when it happens (`capture`):

- a *process* crash (SIGKILL, a halt): everything appended survives (the page cache does);
- a *power* loss: what was flushed (below `Log.flushed_offset`) survives, plus any prefix of the
  unflushed batches, the next one possibly torn;
- after a failed fsync the kernel may have dropped the dirty pages, so that log's unflushed
  batches are kept as after a power loss whatever the crash.

The metadata journal is fsynced at every commit (MetadataStore does so), so it is durable at once.

Every storage effect calls the `Faults` injector first (and some after): it may raise OSError (a
failed append, a failed fsync, a failed journal write) or crash the broker at that point
(`World.crash`), before the effect, after it (between the append and the answer) or in the middle
(a torn append).
"""

from __future__ import annotations

import copy
import errno
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from quafka.broker.core.metadata import ClusterMetadata
from quafka.broker.server.metadata_store import MetadataStore
from quafka.broker.storage import FlushTicket, LogConfig, MemoryLog, MemoryLogStore
from quafka.protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    batch_crc_ok,
    read_header,
    stamp_base_offset,
)

try:  # the storage layer's OSError guard (a failed call takes the log directory offline)
    from quafka.broker.storage.base import guard_storage_calls
except ImportError:  # pragma: no cover - older trees
    guard_storage_calls = None

if TYPE_CHECKING:
    from .world import Incarnation


class SimCrash(BaseException):
    """Raised at a crash point: the broker process is gone, nothing after this runs for it.
    A BaseException so that the broker's `except Exception` handlers do not turn it into an answer."""


@dataclass
class DiskLog:
    topic_id_hex: str
    base_offset: int
    batches: list[bytes]
    log_start_offset: int
    tail: bytes = b""  # torn bytes after the last whole batch
    # the segments after the first: (base offset, index in `batches` of its first batch). A segment
    # the log cleaner rewrote may start below its first batch and leave gaps between batches
    segments: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class SimDisk:
    cluster_id: str
    journal: list[dict] = field(default_factory=list)
    logs: dict[tuple[str, int], DiskLog] = field(default_factory=dict)
    cleaner_checkpoints: dict[tuple[str, int], int] = field(default_factory=dict)  # written durably


# ----------------------------------------------------------------------------- logs


class _FailingTicket(FlushTicket):
    """A flush whose fsync fails with EIO."""

    __slots__ = ()

    def run(self) -> None:
        raise OSError(errno.EIO, "simulated EIO on fsync")


class SimLog(MemoryLog):
    """A MemoryLog whose every effect goes through the fault injector first."""

    def __init__(self, store: "SimLogStore", topic: str, partition: int, config: LogConfig, now_ms: int,
                 base_offset: int = 0) -> None:
        super().__init__(topic, partition, config, now_ms)
        self.store = store
        self.fsync_failed = False
        if base_offset:
            seg = self._segments[0]
            assert len(self._segments) == 1 and not seg.batches, "MemoryLog internals changed"
            seg.base_offset = seg.next_offset = base_offset
            self._bases = [base_offset]
            self._log_start_offset = base_offset
            self.flushed_offset = base_offset

    # -- the effects
    def append(self, buf, batches, now_ms, *, defer_flush: bool = False):
        inc = self.store.inc
        inc.check_alive()
        if batches:
            inc.faults.before_append(inc, self, buf, batches)
            inc.faults.at_txn_step(inc, self, buf, batches, after=False)
        info = super().append(buf, batches, now_ms, defer_flush=defer_flush)
        if batches:
            inc.faults.after_append(inc, self)
            inc.faults.at_txn_step(inc, self, buf, batches, after=True)
        return info

    def begin_flush(self):
        inc = self.store.inc
        inc.check_alive()
        ticket = super().begin_flush()
        if ticket is None:
            return None
        if inc.faults.at_fsync(inc, self):
            self.fsync_failed = True
            return _FailingTicket(ticket.end_offset, ticket.records)
        return ticket

    def delete_records_before(self, offset: int) -> int:
        self.store.inc.check_alive()
        return super().delete_records_before(offset)

    def replace_segments(self, cleaned, base_offsets) -> bool:
        """The log cleaner's swap (crash-safe on disk: FileLog keeps the old segments or the cleaned
        one, never a mix), with a crash just before or just after it: a crash in the middle of a
        cleaning, between one group's swap and the next, or before the checkpoint is written."""
        inc = self.store.inc
        inc.check_alive()
        inc.faults.at_cleaner_swap(inc, self, base_offsets, swapped=False)
        swapped = super().replace_segments(cleaned, base_offsets)
        if swapped:
            inc.faults.at_cleaner_swap(inc, self, base_offsets, swapped=True)
        return swapped

    # -- what a crash keeps
    def stored_segments(self) -> list[tuple[int, list[tuple[int, int, bytes]]]]:
        """[(segment base offset, [(base offset, last offset, bytes) of each batch])], oldest first."""
        return [(seg.base_offset, [(offset, offset + read_header(batch, 0).last_offset_delta, batch)
                                   for offset, batch in zip(seg.batch_offsets, seg.batches)])
                for seg in self._segments]

if guard_storage_calls is not None:
    guard_storage_calls(SimLog, ("append", "delete_records_before", "enforce_retention", "begin_flush", "read",
                                 "read_batches", "offset_for_timestamp", "max_timestamp_offset", "segment_infos",
                                 "open_for_cleaning", "replace_segments"))


def valid_prefix(base_offset: int, batches: Sequence[bytes], tail: bytes) -> tuple[list[bytes], int]:
    """The stored batches up to the first incomplete, malformed, out-of-sequence or corrupt one
    (FileLog's recovery of the active segment, _segment.recover: offsets only grow, with gaps where
    the log cleaner removed batches); returns (kept batches, bytes cut)."""
    kept: list[bytes] = []
    expected = base_offset
    cut = len(tail)
    for i, raw in enumerate(batches):
        ok = len(raw) >= HEADER_SIZE
        if ok:
            h = read_header(raw, 0)
            ok = (h.batch_length >= MIN_BATCH_LENGTH and h.magic == 2 and h.base_offset >= expected
                  and h.batch_length + LOG_OVERHEAD == len(raw) and batch_crc_ok(raw, 0, h))
        if not ok:
            cut += sum(len(b) for b in batches[i:])
            break
        kept.append(raw)
        expected = h.next_offset
    return kept, cut


class SimLogStore(MemoryLogStore):
    """The partition logs of one broker incarnation, rebuilt from the disk image."""

    def __init__(self, inc: "Incarnation", disk: SimDisk, now_ms: int) -> None:
        super().__init__()
        self.inc = inc
        self.recovered_cut_bytes = 0
        for (topic, partition), stored in sorted(disk.logs.items()):
            log = SimLog(self, topic, partition, LogConfig(), now_ms, stored.base_offset)
            log.health = self.health
            kept, cut = valid_prefix(stored.base_offset, stored.batches, stored.tail)
            self.recovered_cut_bytes += cut
            rolls = [(first, base) for base, first in stored.segments if first <= len(kept)]
            for i, raw in enumerate([*kept, None]):
                while rolls and rolls[0][0] == i:
                    _restore_roll(log, rolls.pop(0)[1], now_ms)
                if raw is None:
                    break
                buf = bytearray(raw)
                header = read_header(buf, 0)
                if header.base_offset > log.log_end_offset:  # a gap the log cleaner left
                    log._segments[-1].next_offset = header.base_offset  # noqa: SLF001
                MemoryLog.append(log, buf, [(0, header)], now_ms, defer_flush=True)
                assert read_header(buf, 0).base_offset == header.base_offset
            log._unflushed_records = 0  # noqa: SLF001 - what recovery found is on disk
            log._first_unflushed_ms = None  # noqa: SLF001
            log.flushed_offset = log.log_end_offset
            start = max(stored.base_offset, min(stored.log_start_offset, log.log_end_offset))
            if start > log.log_start_offset:
                MemoryLog.delete_records_before(log, start)
            self._logs[(topic, partition)] = (log, stored.topic_id_hex)
        self.disk = disk

    def read_cleaner_checkpoints(self) -> dict[tuple[str, int], int]:
        return dict(self.disk.cleaner_checkpoints)

    def write_cleaner_checkpoints(self, offsets: dict[tuple[str, int], int]) -> None:
        self.inc.check_alive()
        self.disk.cleaner_checkpoints = dict(offsets)

    def open_log(self, topic: str, partition: int, topic_id_hex: str, config: LogConfig, now_ms: int):
        self.inc.check_alive()
        if (topic, partition) not in self._logs:
            self.inc.faults.at_create_log(self.inc)
            log = SimLog(self, topic, partition, config, now_ms)
            log.health = self.health
            self._logs[(topic, partition)] = (log, topic_id_hex)
            return log
        return super().open_log(topic, partition, topic_id_hex, config, now_ms)

    def delete_log(self, topic: str, partition: int) -> None:
        self.inc.check_alive()
        entry = self._logs.pop((topic, partition), None)
        if entry is not None:
            entry[0].closed = True

    def close(self) -> None:
        """A clean stop: nothing to do (flushing a memory log only moves its counters)."""
        for log, _ in self._logs.values():
            log.closed = True

    # -- what a crash keeps
    def capture(self, disk: SimDisk, *, power: bool, rng, torn: tuple[SimLog, bytes] | None = None) -> dict:
        """Replace `disk.logs` by what survives a crash now; returns counts for the report."""
        logs: dict[tuple[str, int], DiskLog] = {}
        lost_batches = torn_tails = 0
        for (topic, partition), (log, topic_id_hex) in sorted(self._logs.items()):
            segments = log.stored_segments()
            batches = [b for _, seg_batches in segments for b in seg_batches]
            firsts, n = [], len(segments[0][1])
            for base, seg_batches in segments[1:]:
                firsts.append((base, n))
                n += len(seg_batches)
            unsafe = power or log.fsync_failed
            tail = b""
            if unsafe:
                flushed = log.flushed_offset
                durable = [b for b in batches if b[1] < flushed]
                rest = batches[len(durable):]
                keep = rng.randint(0, len(rest)) if rest else 0
                lost_batches += len(rest) - keep
                if keep < len(rest) and rng.random() < 0.5:
                    tail = _tear(rest[keep][2], rng)
                    torn_tails += 1
                batches = durable + rest[:keep]
                # a segment survives with a batch of it, or if it began below the flushed offset
                # (its file was created before a flush that synced the directory)
                firsts = [(base, first) for base, first in firsts if first < len(batches) or base <= flushed]
            if torn is not None and torn[0] is log and not tail:
                tail = torn[1]
                torn_tails += 1
            logs[(topic, partition)] = DiskLog(topic_id_hex, segments[0][0], [b[2] for b in batches],
                                               log.log_start_offset, tail, firsts)
        disk.logs = logs
        return {"lost_batches": lost_batches, "torn_tails": torn_tails}


def _restore_roll(log: SimLog, base_offset: int, now_ms: int) -> None:
    """Recovery: the next segment starts at `base_offset` (at or past the log end so far)."""
    assert base_offset >= log.log_end_offset, (base_offset, log.log_end_offset)
    log._segments[-1].next_offset = base_offset  # noqa: SLF001 - rebuilding MemoryLog's segments
    log._roll(now_ms)  # noqa: SLF001


def _tear(raw: bytes, rng) -> bytes:
    """A torn write of `raw`: cut short, or whole length with garbage where the end should be."""
    if len(raw) > 1 and rng.random() < 0.7:
        return raw[:rng.randint(1, len(raw) - 1)]
    data = bytearray(raw)
    pos = rng.randint(min(HEADER_SIZE, len(data) - 1), len(data) - 1)
    data[pos] ^= 0xFF
    return bytes(data)


def torn_copy(log: SimLog, buf, batches: Sequence[tuple[int, BatchHeader]], rng) -> bytes:
    """The bytes a crash in the middle of appending `batches` to `log` leaves."""
    data = bytearray(buf)
    pos, header = batches[0]
    size = header.batch_length + LOG_OVERHEAD
    stamp_base_offset(data, pos, log.log_end_offset)
    return _tear(bytes(data[pos:pos + size]), rng)


# ----------------------------------------------------------------------------- metadata


class SimMetadataStore(MetadataStore):
    """The metadata journal on the simulated disk (fsynced at every commit, as MetadataStore)."""

    def __init__(self, inc: "Incarnation", disk: SimDisk, node_id: int) -> None:
        super().__init__(None, node_id)
        self.inc = inc
        self.disk = disk

    def load(self) -> ClusterMetadata:
        metadata = ClusterMetadata(cluster_id=self.disk.cluster_id, node_id=self.node_id)
        for record in self.disk.journal:
            metadata.replay(copy.deepcopy(record))
        self.metadata = metadata
        return metadata

    def commit(self, records: list[dict]) -> None:
        assert self.metadata is not None
        inc = self.inc
        inc.check_alive()
        inc.faults.before_meta_commit(inc, records)
        self.disk.journal.extend(copy.deepcopy(records))
        inc.faults.after_meta_commit(inc, records)
        for record in records:
            self.metadata.replay(record)

    def close(self) -> None:
        pass


if guard_storage_calls is not None:  # as FileLogStore: a failed call takes the log directory offline
    guard_storage_calls(SimLogStore, ("open_log", "delete_log", "existing_logs"))
