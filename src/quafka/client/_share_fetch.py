"""Turning one partition of a ShareFetch response into what the share consumer hands out (sans-I/O).

A ShareFetch partition carries whole record batches and the ranges of offsets the broker acquired
for this member (``AcquiredRecords``: first, last, delivery count). The batches may hold records
outside those ranges (another member has them, or they are already acknowledged); those are
dropped. Every acquired offset ends in exactly one of:

- a Record with its ``delivery_count`` (in increasing offset order);
- GAP, when the batch covering it has no record there (a control batch, or compaction);
- REJECT, when the batch covering it fails its CRC check or does not decode — and a
  CorruptRecordException takes the batch's place in the sequence the application sees;
- RELEASE, when no batch of the response covers it at all (the broker cut the response short),
  so that it is delivered again rather than lost.

``ShareFetchBuffer`` keeps decoded partitions in arrival order; ``take`` hands out records up to a
limit, stopping before an error item that is not first (the error is raised by the poll after).

``poll_batches`` (a quafka extension, for consumers that decode elsewhere, such as the Spark
source's runner fanning records out to executors) skips the per-record decoding: ``raw_acquired``
reads only the batch headers and hands out one ``AcquiredBatches`` per partition — the response's
record bytes and the acquired ranges that its batches cover (acquired offsets no batch covers are
RELEASEd, as above). ``AcquiredBatches.records()`` decodes later, with the rules above.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import NamedTuple

from quafka.protocol import record_batch as rb

from ._share_acks import GAP, AcknowledgeType
from .errors import CorruptRecordException, KafkaException
from .records import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Record, TopicPartition

__all__ = ["AcquiredBatches", "BatchCache", "DecodedPartition", "RECORD_COLUMNS", "ShareFetchBuffer", "decode_acquired", "raw_acquired"]


class DecodedPartition(NamedTuple):
    tp: TopicPartition
    items: list  # Record or KafkaException, in offset order
    acks: dict[int, int]  # acknowledgements the consumer makes on its own (GAP, REJECT, RELEASE)
    bytes_count: int
    errors: int = 0  # KafkaException items among ``items``

    @property
    def records_count(self) -> int:
        return len(self.items) - self.errors


def _acquired_ranges(acquired) -> tuple[list[int], list[int], list[int]]:
    ranges = sorted(_as_triple(a) for a in acquired)
    return [r[0] for r in ranges], [r[1] for r in ranges], [r[2] for r in ranges]


def _as_triple(a) -> tuple[int, int, int]:
    if isinstance(a, tuple):
        return a[0], a[1], a[2]
    return a.first_offset, a.last_offset, a.delivery_count


#: AcquiredBatches.columns(): the Record fields that vary per record
RECORD_COLUMNS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers", "delivery_count", "leader_epoch")


class AcquiredBatches(NamedTuple):
    """Records acquired from one partition, undecoded: ``data`` holds whole v2 record batches and
    ``acquired`` the (first, last, delivery count) ranges of acquired offsets that those batches
    cover, in offset order. Picklable; ``records()`` decodes it anywhere."""

    topic: str
    partition: int
    data: bytes
    acquired: list[tuple[int, int, int]]

    @property
    def count(self) -> int:
        """Acquired offsets (records, plus offsets of control records or compacted gaps)."""
        return sum(last - first + 1 for first, last, _ in self.acquired)

    def offsets(self) -> list[int]:
        return [o for first, last, _ in self.acquired for o in range(first, last + 1)]

    def records(self, check_crcs: bool = True) -> list:
        """The acquired records in offset order (Record, or CorruptRecordException in place of a
        batch that fails its CRC or does not decode), as ``poll`` would have returned them."""
        return decode_acquired(TopicPartition(self.topic, self.partition), self.data, self.acquired,
                               check_crcs=check_crcs).items

    def columns(self, check_crcs: bool = True) -> dict[str, list]:
        """The records of ``records()`` as columns (``RECORD_COLUMNS`` → lists; a record's headers
        may be a tuple of (key, value) pairs here), without a Record object per record; raises
        CorruptRecordException where ``records()`` has one. A batch that lies whole in one
        acquired range (the usual case) is transposed as decoded; any other batch (a control
        batch, compacted gaps, partly acquired or repeated) goes through ``decode_acquired``."""
        cols: dict[str, list] = {name: [] for name in RECORD_COLUMNS}
        firsts, lasts, counts = _acquired_ranges(self.acquired)
        if not firsts:
            return cols
        tp = TopicPartition(self.topic, self.partition)
        view = memoryview(self.data)
        done_upto = firsts[0] - 1
        for pos, header in rb.iter_headers(self.data):
            first, last = header.base_offset, header.last_offset
            if last <= done_upto or first > lasts[-1]:
                continue  # before the acquired offsets, or a batch the data already carried
            i = bisect.bisect_right(firsts, first) - 1
            batch = view[pos : pos + header.size_bytes]
            decoded = None
            if (first > done_upto and not header.is_control and header.magic == 2 and i >= 0 and last <= lasts[i]
                    and (not check_crcs or rb.batch_crc_ok(self.data, pos, header))):
                try:
                    decoded = list(rb.iter_records(batch))
                except Exception:  # noqa: BLE001 - decode_acquired rejects it with the reason
                    decoded = None
                if decoded is not None and len(decoded) != last - first + 1:
                    decoded = None  # compacted gaps
            if decoded is not None:
                n = len(decoded)
                offsets, timestamps, keys, values, headers = zip(*decoded)
                cols["offset"].extend(offsets)
                cols["timestamp"].extend(timestamps)
                cols["key"].extend(keys)
                cols["value"].extend(values)
                cols["headers"].extend(headers)
                cols["timestamp_type"].extend([TIMESTAMP_LOG_APPEND_TIME if header.attributes & rb.TIMESTAMP_TYPE_MASK
                                               else TIMESTAMP_CREATE_TIME] * n)
                cols["delivery_count"].extend([counts[i]] * n)
                cols["leader_epoch"].extend([header.partition_leader_epoch] * n)
            else:
                low = max(first, done_upto + 1)
                ranges = [(max(f, low), min(l, last), c) for f, l, c in zip(firsts, lasts, counts)
                          if f <= last and l >= low]
                for r in decode_acquired(tp, batch, ranges, check_crcs=check_crcs).items:
                    if isinstance(r, KafkaException):
                        raise r
                    for name in RECORD_COLUMNS:
                        cols[name].append(getattr(r, name))
            done_upto = last
        return cols

    def split(self, max_count: int) -> list["AcquiredBatches"]:
        """Consecutive pieces of about ``max_count`` acquired offsets each, cut at batch
        boundaries; a batch holding twice that or more is shared by pieces of ``max_count``
        offsets (each carries its bytes)."""
        if self.count <= max_count:
            return [self]
        pieces: list[AcquiredBatches] = []
        start_pos = 0
        first_offset = None
        done_upto = -1  # the last offset of the pieces cut so far: each offset goes to one piece
        pending = 0
        view = memoryview(self.data)

        def cut(end_pos: int, low: int, high: int) -> None:
            ranges = [(max(f, low), min(l, high), dc) for f, l, dc in self.acquired if f <= high and l >= low]
            if ranges:
                pieces.append(AcquiredBatches(self.topic, self.partition, bytes(view[start_pos:end_pos]), ranges))

        for pos, header in rb.iter_headers(self.data):
            if first_offset is None:
                first_offset, start_pos = max(header.base_offset, done_upto + 1), pos
            pending += sum(min(l, header.last_offset) - max(f, header.base_offset) + 1
                           for f, l, _ in self.acquired if f <= header.last_offset and l >= header.base_offset)
            if pending >= max_count and header.last_offset >= first_offset:
                cut(pos + header.size_bytes, first_offset, header.last_offset)
                done_upto = header.last_offset
                first_offset, pending = None, 0
        if first_offset is not None:
            cut(len(self.data), first_offset, max(l for _, l, _ in self.acquired))
        # a piece far over the count holds a big batch: share its bytes among pieces of ranges
        # (each decodes the batch and keeps its own offsets)
        return [part for piece in pieces
                for part in (piece.share(max_count) if piece.count >= 2 * max_count else [piece])]

    def share(self, max_count: int) -> list["AcquiredBatches"]:
        """The acquired ranges cut into pieces of ``max_count`` offsets that all carry the same
        bytes (each piece decodes them and keeps its own offsets): for a batch too big to split."""
        out: list[AcquiredBatches] = []
        chunk: list[tuple[int, int, int]] = []
        room = max_count
        for first, last, dc in self.acquired:
            while first <= last:
                take = min(room, last - first + 1)
                chunk.append((first, first + take - 1, dc))
                first += take
                room -= take
                if room == 0:
                    out.append(self._replace(acquired=chunk))
                    chunk, room = [], max_count
        if chunk:
            out.append(self._replace(acquired=chunk))
        return out


def raw_acquired(tp: TopicPartition, data: bytes | memoryview | None,
                 acquired) -> tuple[AcquiredBatches | None, dict[int, int]]:
    """One ShareFetch partition, undecoded: (the covered acquired ranges with the record bytes, or
    None; RELEASE for acquired offsets no complete batch covers). Reads batch headers only."""
    firsts, lasts, counts = _acquired_ranges(acquired)
    if not firsts:
        return None, {}
    covered: list[tuple[int, int]] = []
    if data:
        for _pos, header in rb.iter_headers(data):
            if covered and header.base_offset <= covered[-1][1] + 1:
                covered[-1] = (covered[-1][0], max(covered[-1][1], header.last_offset))
            else:
                covered.append((header.base_offset, header.last_offset))
        covered.sort()
    ranges, releases = _coverage(firsts, lasts, counts, covered)
    if not ranges:
        return None, releases
    return AcquiredBatches(tp.topic, tp.partition, bytes(data), ranges), releases


def _coverage(firsts: list[int], lasts: list[int], counts: list[int], covered: list[tuple[int, int]]
              ) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
    """The acquired ranges cut to the offsets some batch covers (``covered``: sorted spans, may
    overlap), and RELEASE for the acquired offsets none covers (so that they come back)."""
    ranges: list[tuple[int, int, int]] = []
    releases: dict[int, int] = {}
    for first, last, count in zip(firsts, lasts, counts):
        offset = first
        for c_first, c_last in covered:
            if c_last < offset or c_first > last:
                continue
            if c_first > offset:
                releases.update((o, AcknowledgeType.RELEASE) for o in range(offset, c_first))
                offset = c_first
            top = min(c_last, last)
            ranges.append((offset, top, count))
            offset = top + 1
        if offset <= last:
            releases.update((o, AcknowledgeType.RELEASE) for o in range(offset, last + 1))
    return ranges, releases


class BatchCache:
    """The decoded records of the last few record batches a consumer saw, by (partition, base
    offset, CRC, size). With ``share.acquire.mode=record_limit`` and a small ``max.poll.records``
    each ShareFetch carries the same whole batch for a few of its offsets; decoding it once instead
    of per fetch keeps a one-record ShareFetch cheap (the job-queue workload: a 3,000-record batch
    cost ~3 ms per fetch to decode again). Bounded LRU; pure (no I/O)."""

    def __init__(self, max_batches: int = 8) -> None:
        self.max_batches = max_batches
        self._entries: dict[tuple, tuple[list, list[int]]] = {}  # insertion-ordered: oldest first

    def records(self, key: tuple, decode) -> tuple[list, list[int]]:
        """(records, their offsets) of the batch ``key``; ``decode()`` on a miss."""
        entry = self._entries.pop(key, None)
        if entry is None:
            records = decode()
            entry = (records, [r.offset for r in records])
            while len(self._entries) >= self.max_batches:
                del self._entries[next(iter(self._entries))]
        self._entries[key] = entry
        return entry


def decode_acquired(tp: TopicPartition, data: bytes | memoryview | None, acquired, *, check_crcs: bool,
                    cache: BatchCache | None = None) -> DecodedPartition:
    """Split the acquired offsets of one ShareFetch partition into records, GAPs, REJECTs and
    RELEASEs (see the module docstring). ``cache`` keeps decoded batches between calls (a batch
    only partly acquired is decoded once, then sliced)."""
    firsts, lasts, counts = _acquired_ranges(acquired)
    items: list = []
    acks: dict[int, int] = {}
    covered: list[tuple[int, int]] = []
    if not firsts:
        return DecodedPartition(tp, items, acks, len(data or b""))

    def count_of(offset: int) -> int | None:
        i = bisect.bisect_right(firsts, offset) - 1
        return counts[i] if i >= 0 and offset <= lasts[i] else None

    def acquired_in(first: int, last: int):
        i = max(bisect.bisect_right(firsts, first) - 1, 0)
        while i < len(firsts) and firsts[i] <= last:
            lo, hi = max(firsts[i], first), min(lasts[i], last)
            if lo <= hi:
                yield from range(lo, hi + 1)
            i += 1

    low, high = firsts[0], max(lasts)
    done_upto = low - 1  # the last offset of the batches handled so far: each offset is handled once
    if data:
        for pos, header in rb.iter_headers(data):
            first, last = header.base_offset, header.last_offset
            if last < low or first > high or last <= done_upto:
                continue  # outside the acquired offsets, or a batch the response already carried
            if first <= done_upto:
                first = done_upto + 1  # overlaps what came before: only its later offsets are new
            done_upto = last
            covered.append((first, last))
            where = f"{tp.topic}-{tp.partition} batch at offsets {header.base_offset}..{last}"
            if header.magic != 2 or (check_crcs and not rb.batch_crc_ok(data, pos, header)):
                reason = (f"has magic {header.magic}; only magic 2 is readable" if header.magic != 2
                          else "failed its CRC32C check (check.crcs)")
                _reject(items, acks, acquired_in(first, last), CorruptRecordException(f"{where} {reason}; "
                        f"its acquired records were rejected"))
                continue
            if header.is_control:
                acks.update((o, GAP) for o in acquired_in(first, last))
                continue
            timestamp_type = TIMESTAMP_LOG_APPEND_TIME if header.attributes & rb.TIMESTAMP_TYPE_MASK else TIMESTAMP_CREATE_TIME
            epoch = header.partition_leader_epoch
            i = bisect.bisect_right(firsts, first) - 1
            whole = first == header.base_offset and i >= 0 and last <= lasts[i]
            try:
                if cache is not None and not whole:
                    decoded, offsets = cache.records(
                        (tp, header.base_offset, header.crc, header.size_bytes),
                        lambda: list(rb.iter_records(memoryview(data)[pos : pos + header.size_bytes])))
                else:
                    decoded = list(rb.iter_records(memoryview(data)[pos : pos + header.size_bytes]))
                    offsets = None
            except Exception as exc:  # a codec or varint error inside the batch
                codec = rb.COMPRESSION_NAMES.get(header.compression, header.compression)
                _reject(items, acks, acquired_in(first, last), CorruptRecordException(
                    f"{where} does not decode ({codec}): {type(exc).__name__}: {exc}; its acquired records were rejected"))
                continue
            if whole:
                # the usual case: the whole batch lies in one acquired range
                count, topic, partition = counts[i], tp.topic, tp.partition
                items.extend([Record(topic, partition, r.offset, r.timestamp, timestamp_type, r.key, r.value,
                                     list(r.headers), epoch, count) for r in decoded])
                if len(decoded) != last - first + 1:
                    present = {r.offset for r in decoded}
                    acks.update((o, GAP) for o in range(first, last + 1) if o not in present)
                continue
            if offsets is not None:  # a cached batch: only the records in acquired ranges, found by bisection
                for lo, hi, count in _acquired_runs(firsts, lasts, counts, first, last):
                    start, end = bisect.bisect_left(offsets, lo), bisect.bisect_right(offsets, hi)
                    for r in decoded[start:end]:
                        items.append(Record(tp.topic, tp.partition, r.offset, r.timestamp, timestamp_type, r.key,
                                            r.value, list(r.headers), epoch, count))
                    if end - start != hi - lo + 1:
                        present = set(offsets[start:end])
                        acks.update((o, GAP) for o in range(lo, hi + 1) if o not in present)
                continue
            seen = set()
            for r in decoded:
                count = count_of(r.offset) if r.offset >= first else None
                if count is not None:
                    seen.add(r.offset)
                    items.append(Record(tp.topic, tp.partition, r.offset, r.timestamp, timestamp_type, r.key, r.value,
                                        list(r.headers), epoch, count))
            for offset in acquired_in(first, last):
                if offset not in seen:
                    acks[offset] = GAP
    # acquired offsets that no batch covered: released so that they come back
    covered.sort()
    acks.update(_coverage(firsts, lasts, counts, covered)[1])
    errors = sum(1 for i in items if isinstance(i, KafkaException)) if acks else 0
    return DecodedPartition(tp, items, acks, len(data or b""), errors)


def _acquired_runs(firsts: list[int], lasts: list[int], counts: list[int], first: int, last: int):
    """The acquired ranges clipped to [first, last], with their delivery counts, in offset order."""
    i = max(bisect.bisect_right(firsts, first) - 1, 0)
    while i < len(firsts) and firsts[i] <= last:
        lo, hi = max(firsts[i], first), min(lasts[i], last)
        if lo <= hi:
            yield lo, hi, counts[i]
        i += 1


def _reject(items: list, acks: dict[int, int], offsets, error: KafkaException) -> None:
    rejected = list(offsets)
    if rejected:
        acks.update((o, AcknowledgeType.REJECT) for o in rejected)
        items.append(error)


class ShareFetchBuffer:
    """Decoded partitions waiting for ``poll``, in arrival order."""

    def __init__(self) -> None:
        self._parts: deque[list] = deque()  # [tp, items, index, no error items]

    def __bool__(self) -> bool:
        return bool(self._parts)

    def add(self, decoded: DecodedPartition) -> None:
        if decoded.items:
            clean = not decoded.errors
            self._parts.append([decoded.tp, decoded.items, 0, clean])

    def take(self, max_records: int | None) -> tuple[list[Record], KafkaException | None]:
        """Up to ``max_records`` records (None: all buffered), or — when an error item comes
        first — no records and that error."""
        out: list[Record] = []
        while self._parts and (max_records is None or len(out) < max_records):
            part = self._parts[0]
            tp, items, index, _clean = part
            if part[3]:  # no error items: hand out a slice
                stop = len(items) if max_records is None else min(len(items), index + max_records - len(out))
                out.extend(items[index:stop])
                part[2] = stop
                if stop >= len(items):
                    self._parts.popleft()
                continue
            while index < len(items) and (max_records is None or len(out) < max_records):
                item = items[index]
                if isinstance(item, KafkaException):
                    if out:
                        part[2] = index
                        return out, None
                    part[2] = index + 1
                    if part[2] >= len(items):
                        self._parts.popleft()
                    return [], item
                out.append(item)
                index += 1
            part[2] = index
            if index >= len(items):
                self._parts.popleft()
        return out, None

    def push_front(self, records: list[Record]) -> None:
        """Put records that were taken but not handed out back in front, in their order."""
        runs: list[list] = []
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            if runs and runs[-1][0] == tp:
                runs[-1][1].append(record)
            else:
                runs.append([tp, [record], 0, True])
        for run in reversed(runs):
            self._parts.appendleft(run)

    def drop(self, partitions: set[TopicPartition]) -> dict[TopicPartition, list[int]]:
        """Remove the buffered records of ``partitions``; returns their offsets (to be released)."""
        dropped: dict[TopicPartition, list[int]] = {}
        kept: deque[list] = deque()
        for part in self._parts:
            tp, items, index, _clean = part
            if tp in partitions:
                for i in items[index:]:
                    if isinstance(i, Record):
                        dropped.setdefault(tp, []).append(i.offset)
                    elif isinstance(i, AcquiredBatches):
                        dropped.setdefault(tp, []).extend(i.offsets())
            else:
                kept.append(part)
        self._parts = kept
        return dropped

    def partitions(self) -> set[TopicPartition]:
        return {part[0] for part in self._parts}
