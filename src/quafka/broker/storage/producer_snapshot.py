"""Producer-state snapshots: `<20-digit offset>.snapshot` files in a partition's directory.

Kafka keeps the idempotent and transactional producers' state of a partition in snapshot files next to its segments
(`ProducerStateManager.takeSnapshot` / `writeSnapshot` / `readSnapshot`, storage module
`org.apache.kafka.storage.internals.log`). A snapshot named after offset N holds the state after
every batch below N. It is taken when a segment is rolled (`UnifiedLog.roll`: N is the new
segment's base offset), on clean shutdown (N is the log end offset), and after start-up rebuilt
the state (`UnifiedLog.rebuildProducerState`). At start-up the latest valid snapshot at or below
the log end offset is read and only the batches from N on are replayed; a snapshot that cannot be
read is deleted with a warning and the next older one is tried (`loadFromSnapshot`), down to a
scan from the log start. Snapshots go with their segments (a segment's deletion deletes the
snapshot at its base offset), and at start-up the strays are removed (`removeStraySnapshots`):
every snapshot that is not at a segment's base offset, except the newest one when it lies above
the last segment's base (the clean-shutdown one).

File layout (Kafka's, version 1; big-endian):

    version               int16   1
    crc                   uint32  CRC32C of every byte after this field
    producer_entries      int32 count, then per entry:
      producer_id         int64
      epoch               int16
      last_sequence       int32
      last_offset         int64   last offset of the batch
      offset_delta        int32   last_sequence - first sequence (= last_offset - first offset)
      timestamp           int64   max timestamp of the batch (-1 when unknown)
      coordinator_epoch   int32   of the producer's last COMMIT/ABORT marker (-1: none)
      current_txn_first_offset int64  first offset of its open transaction (-1: none)

Kafka writes one entry per producer (its last batch). quafka writes one entry per batch it keeps
for duplicate detection (up to five per producer, oldest first), so a retried batch that is not
the producer's last is still recognised after a restart; a reader that keeps the last entry per
producer id, as Kafka's does, reads the same state Kafka would have written.

Writes go to `<name>.tmp` and are renamed into place, so a crash mid-write never leaves a torn
snapshot under the final name (`.tmp` leftovers are removed when the log opens); `sync=True`
(clean shutdown) also fsyncs the file before the rename and the directory after it. A snapshot
written without sync that a power loss tore is caught by its CRC and skipped.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Iterable, NamedTuple, Sequence

import crc32c

from ._segment import _fsync_dir, _unlink, _write_all

log = logging.getLogger("quafka.storage")

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_CRC_START = 6  # the CRC covers everything after version and crc
_ENTRY = struct.Struct(">qhiqiqiq")
NO_TIMESTAMP = -1


class CorruptSnapshotError(ValueError):
    """Kafka's CorruptSnapshotException: the file is not a readable version-1 snapshot."""


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int = NO_TIMESTAMP
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


def encode_snapshot(entries: Iterable[Sequence[int]]) -> bytes:
    """The file's bytes for `entries` (SnapshotEntry or tuples in its field order)."""
    body = bytearray()
    count = 0
    pack = _ENTRY.pack
    for entry in entries:
        body += pack(*entry)
        count += 1
    body[0:0] = count.to_bytes(4, "big", signed=True)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[tuple[int, int, int, int, int, int, int, int]]:
    """The entries of a snapshot file's bytes, as tuples in SnapshotEntry's field order (equal to
    SnapshotEntry values); CorruptSnapshotError when the version, the length or the CRC is wrong
    (Kafka's readSnapshot)."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot is {len(data)} bytes, shorter than its header")
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot is corrupt (CRC is no longer valid): stored {crc}, computed {computed}")
    return list(_ENTRY.iter_unpack(memoryview(data)[_HEADER.size:]))


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerSnapshots:
    """The snapshot files of one partition directory (the FileLog's). Offsets are tracked in
    memory once listed, so taking and deleting snapshots lists nothing."""

    def __init__(self, dir_path: str, names: Iterable[str] | None = None) -> None:
        self.dir_path = dir_path
        if names is None:
            names = os.listdir(dir_path)
        suffix, cut = SNAPSHOT_SUFFIX, -len(SNAPSHOT_SUFFIX)
        self._offsets: set[int] = {int(n[:cut]) for n in names if n.endswith(suffix) and n[:cut].isdigit()}

    @property
    def offsets(self) -> list[int]:
        """Offsets of the snapshots on disk, oldest first."""
        return sorted(self._offsets)

    def path(self, offset: int) -> str:
        return os.path.join(self.dir_path, snapshot_file_name(offset))

    def write(self, offset: int, entries: Iterable[Sequence[int]], *, sync: bool) -> None:
        """Write the snapshot at `offset` (replacing one there): temporary file, [fsync,] rename
        [, fsync the directory]. On an OSError nothing is left under the final name."""
        data = encode_snapshot(entries)
        path = self.path(offset)
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, path)
        self._offsets.add(offset)
        if sync:
            _fsync_dir(self.dir_path)

    def read(self, offset: int) -> list[tuple]:
        """The entries of the snapshot at `offset` (OSError, CorruptSnapshotError)."""
        with open(self.path(offset), "rb") as f:
            return decode_snapshot(f.read())

    def delete(self, offset: int) -> None:
        self._offsets.discard(offset)
        _unlink(self.path(offset))

    def delete_below(self, offset: int) -> None:
        for o in [o for o in self._offsets if o < offset]:
            self.delete(o)

    def remove_stray(self, segment_base_offsets: Sequence[int], log_end_offset: int) -> None:
        """Kafka's removeStraySnapshots, plus snapshots past the log end (their data was lost):
        keep the snapshots at segment base offsets and the newest other one if it lies above the
        last segment's base offset."""
        bases = set(segment_base_offsets)
        last_base = max(segment_base_offsets) if segment_base_offsets else 0
        strays = [o for o in self.offsets if o not in bases or o > log_end_offset]
        within = [o for o in strays if o <= log_end_offset]
        keep = within[-1] if within and within[-1] > last_base else None
        for o in strays:
            if o != keep:
                self.delete(o)

    def load_latest(self, max_offset: int) -> tuple[int, list[tuple]] | None:
        """(offset, entries) of the newest readable snapshot at or below `max_offset`, or None.
        An unreadable one is deleted with a warning and the next older one is tried, as Kafka's
        loadFromSnapshot does."""
        for offset in reversed(self.offsets):
            if offset > max_offset:
                continue
            try:
                return offset, self.read(offset)
            except (OSError, CorruptSnapshotError) as exc:
                log.warning("ignoring producer snapshot %s: %s", self.path(offset), exc)
                try:
                    self.delete(offset)
                except OSError:
                    self._offsets.discard(offset)
        return None
