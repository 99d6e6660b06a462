"""Kafka v2 record batches straight into Arrow columns, without a Python object per record: what
the executors of the share-group stream (and the readers by offset) spend their time on.

A record batch's records are varint-framed one after the other, so finding where each record starts
is a sequential walk; this module does only that walk in Python (one length varint per record)
and decodes every field after it with numpy over all the records of a piece at once:

1. the bodies of the batches that go the fast way (whole v2 data batches, CRC checked, lying in one
   acquired range, no compacted gaps) are decompressed and joined;
2. the walk gives each record's start and end in the joined buffer;
3. the zigzag varints (timestamp delta, offset delta, key and value lengths, header count) are
   decoded column-wise, a byte position at a time over every record;
4. keys and values become Arrow binary arrays by one gather of their bytes and their lengths'
   prefix sums (``pyarrow.Array.from_buffers``); topic, partition, timestamp type, delivery count
   and the empty headers are filled without per-record work.

What does not fit that shape goes through ``AcquiredBatches.columns()`` (a record per Python
object, as before): control batches, batches partly acquired, repeated or with compacted gaps,
magic below 2 — and records with headers (a piece where any record carries headers is decoded the
slow way whole; the column is a list of structs per record). Every record's framing is checked: the
fields decoded must end where its length says, else the piece goes the slow way, which raises
``CorruptRecordException`` on a malformed batch as before (a task fails on corrupt data, as with
Spark's Kafka source).
"""

from __future__ import annotations

import bisect
from typing import Any, Iterator

import numpy as np

from quafka.protocol import record_batch as rb

__all__ = ["acquired_arrow_batches", "fetched_arrow_batches"]

_PAD = 16  # zero bytes after the joined bodies: a varint read a few bytes past a body stays in range
_MAX_VARINT_BYTES = 10


def _zigzag_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varlongs at each position of ``pos`` in ``buf``: (values, positions after them)."""
    raw = np.zeros(len(pos), dtype=np.uint64)
    width = np.zeros(len(pos), dtype=np.int64)
    open_ = np.ones(len(pos), dtype=bool)
    for k in range(_MAX_VARINT_BYTES):
        b = buf[pos + k].astype(np.uint64)
        raw |= np.where(open_, (b & np.uint64(0x7F)) << np.uint64(7 * k), np.uint64(0))
        width += open_
        open_ &= b >= 0x80
        if not open_.any():
            break
    else:
        raise ValueError("a varint longer than 10 bytes")
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, pos + width


def _walk(joined: bytes, body_starts: list[int], counts: list[int]) -> np.ndarray:
    """Where each record (its length varint) begins in ``joined``: the one sequential step."""
    at: list[int] = []
    append = at.append
    read_varint = rb._read_varint
    for pos, count in zip(body_starts, counts):
        for _ in range(count):
            append(pos)
            b = joined[pos]
            if b < 0x80:
                pos += 1 + ((b >> 1) ^ -(b & 1))
                continue
            b2 = joined[pos + 1]
            if b2 < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                pos += 2 + ((raw >> 1) ^ -(raw & 1))
            else:
                length, pos = read_varint(joined, pos)
                pos += length
    return np.array(at, dtype=np.int64)


def _binary_array(pa: Any, buf: np.ndarray, first: np.ndarray, lengths: np.ndarray):
    """An Arrow binary array of ``buf[first[i] : first[i] + lengths[i]]`` (null where the length is -1)."""
    n = len(first)
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total > np.iinfo(np.int32).max:
        raise ValueError("more than 2 GiB of keys or values in one piece")
    # the fields lie in order without overlapping: a mask of alternating runs (the bytes before a
    # field, the field) picks them in one pass
    runs = np.empty(2 * n + 1, dtype=np.int64)
    runs[0:-1:2] = first - np.concatenate(([0], first[:-1] + sizes[:-1]))
    runs[1::2] = sizes
    runs[-1] = len(buf) - (first[-1] + sizes[-1]) if n else len(buf)
    pattern = np.zeros(2 * n + 1, dtype=bool)
    pattern[1::2] = True
    data = buf[np.repeat(pattern, runs)]
    nulls = n - int(valid.sum())
    validity = None if not nulls else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(data)], null_count=nulls)


def _fast_batch(pa: Any, schema: Any, topic: str, partition: int, parts: list[tuple]):
    """One Arrow RecordBatch of ``parts`` [(body, header, delivery count)], or None when a record
    has headers or does not frame as its length says (the caller decodes those the slow way)."""
    bodies = [body for body, _, _ in parts]
    counts = [header.records_count for _, header, _ in parts]
    body_starts = []
    pos = 0
    for body in bodies:
        body_starts.append(pos)
        pos += len(body)
    joined = b"".join(bodies)
    try:
        at = _walk(joined, body_starts, counts)
    except (IndexError, ValueError):
        return None
    n = len(at)
    if not n:
        return None
    buf = np.frombuffer(joined + bytes(_PAD), dtype=np.uint8)
    try:
        lengths, starts = _zigzag_varints(buf, at)
        ends = starts + lengths
        if (lengths <= 0).any() or int(ends[-1]) > len(joined):
            return None
        ts_delta, p = _zigzag_varints(buf, starts + 1)  # + 1: the record's attributes byte
        off_delta, p = _zigzag_varints(buf, p)
        key_len, p = _zigzag_varints(buf, p)
        key_at = p
        p = p + np.maximum(key_len, 0)
        value_len, p = _zigzag_varints(buf, p)
        value_at = p
        p = p + np.maximum(value_len, 0)
        header_count, p = _zigzag_varints(buf, p)
    except (IndexError, ValueError):  # a field past the data: the slow way names the corrupt batch
        return None
    if header_count.any() or not np.array_equal(p, ends):
        return None
    counts_arr = np.array(counts, dtype=np.int64)
    base_offset = np.repeat(np.array([h.base_offset for _, h, _ in parts], dtype=np.int64), counts_arr)
    log_append = np.repeat(np.array([bool(h.attributes & rb.TIMESTAMP_TYPE_MASK) for _, h, _ in parts]), counts_arr)
    base_ts = np.repeat(np.array([h.base_timestamp for _, h, _ in parts], dtype=np.int64), counts_arr)
    max_ts = np.repeat(np.array([h.max_timestamp for _, h, _ in parts], dtype=np.int64), counts_arr)
    timestamp_ms = np.where(log_append, max_ts, base_ts + ts_delta)
    delivery = [dc for _, _, dc in parts]
    topic_bytes = topic.encode()
    headers_type = schema.field("headers").type
    columns = [
        _binary_array(pa, buf, key_at, key_len),
        _binary_array(pa, buf, value_at, value_len),
        pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer((np.arange(n + 1, dtype=np.int32)
                                                                   * len(topic_bytes))),
                                               pa.py_buffer(topic_bytes * n)]),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(base_offset + off_delta),
        pa.array(timestamp_ms * 1000, schema.field("timestamp").type),
        pa.array(log_append.astype(np.int32)),  # 1: LogAppendTime, 0: CreateTime
        pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                 pa.array([], headers_type.value_type), type=headers_type),
        pa.nulls(n, pa.int32()) if all(dc is None for dc in delivery) else
        pa.array(np.repeat(np.array([-1 if dc is None else dc for dc in delivery], dtype=np.int32), counts_arr),
                 pa.int32(), mask=np.repeat(np.array([dc is None for dc in delivery]), counts_arr)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def acquired_arrow_batches(item: Any, check_crcs: bool = True) -> Iterator[Any]:
    """``pyarrow.RecordBatch``es of RECORD_SCHEMA holding the acquired records of ``item`` (a
    ``quafka.client.AcquiredBatches``: whole record batches and the acquired ranges they cover; a
    delivery count of None gives a null ``deliveryCount``), in offset order."""
    import pyarrow as pa

    from quafka.client import AcquiredBatches

    from .arrow import arrow_schema, columns_batch

    schema = arrow_schema()
    acquired = sorted(item.acquired, key=lambda r: r[0])
    if not acquired:
        return
    firsts = [f for f, _, _ in acquired]
    lasts = [last for _, last, _ in acquired]
    data = item.data
    view = memoryview(data)
    fast: list[tuple] = []  # (body, header, delivery count) of the batches going the fast way
    fast_raw: list[tuple[int, int]] = []  # their (position, size) in data, for the slow way

    def slow(spans: list[tuple[int, int]], low: int, high: int):
        chunk = b"".join(bytes(view[p : p + s]) for p, s in spans)
        ranges = [(max(f, low), min(last, high), dc) for f, last, dc in acquired if f <= high and last >= low]
        # a read by offset has no delivery count (null); columns() takes offsets without one as not
        # acquired, so it gets 0 and the column is nulled after
        unknown = any(dc is None for _, _, dc in ranges)
        if unknown:
            ranges = [(f, last, 0 if dc is None else dc) for f, last, dc in ranges]
        cols = AcquiredBatches(item.topic, item.partition, chunk, ranges).columns(check_crcs)
        if unknown:
            counts = [dc for _, _, dc in acquired]
            if any(dc is not None for dc in counts):
                raise ValueError("a piece mixes ranges with and without a delivery count")
            cols["delivery_count"] = [None] * len(cols["offset"])
        if cols["offset"]:
            yield columns_batch(item.topic, item.partition, cols)

    def flush():
        if not fast:
            return
        batch = _fast_batch(pa, schema, item.topic, item.partition, fast)
        if batch is None:  # headers, or a framing the slow way explains (or rejects)
            low = fast[0][1].base_offset
            high = fast[-1][1].last_offset
            yield from slow(list(fast_raw), low, high)
        elif batch.num_rows:
            yield batch
        fast.clear()
        fast_raw.clear()

    done_upto = firsts[0] - 1
    for pos, header in rb.iter_headers(data):
        first, last = header.base_offset, header.last_offset
        if last <= done_upto or first > lasts[-1]:
            continue  # before the acquired offsets, or a batch the data already carried
        i = bisect.bisect_right(firsts, first) - 1
        whole = (first > done_upto and not header.is_control and header.magic == 2 and i >= 0 and last <= lasts[i]
                 and header.records_count == last - first + 1
                 and (not check_crcs or rb.batch_crc_ok(data, pos, header)))
        if whole:
            raw = view[pos + rb.HEADER_SIZE : pos + header.size_bytes]
            try:
                body = rb.decompress(header.compression, raw) if header.compression else bytes(raw)
            except Exception:  # noqa: BLE001 - the slow way rejects it with the reason
                whole = False
        if whole:
            fast.append((body, header, acquired[i][2]))
            fast_raw.append((pos, header.size_bytes))
        else:
            yield from flush()
            yield from slow([(pos, header.size_bytes)], max(first, done_upto + 1), last)
        done_upto = last
    yield from flush()


def fetched_arrow_batches(topic: str, partition: int, chunks: Iterator[tuple[bytes, int, int]],
                          delivery_count: int | None = None, check_crcs: bool = True) -> Iterator[Any]:
    """``pyarrow.RecordBatch``es of a read by offset: ``chunks`` as ``PartitionReader.read_raw``
    yields them (record batches, first and last offset read); ``deliveryCount`` is
    ``delivery_count`` for all (None: null)."""
    from quafka.client import AcquiredBatches

    for data, first, last in chunks:
        yield from acquired_arrow_batches(AcquiredBatches(topic, partition, data, [(first, last, delivery_count)]),
                                          check_crcs)
