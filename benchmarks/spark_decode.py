#!/usr/bin/env python3
"""The Spark executors' decoding, side by side in one process and without Spark: the record
batches of a piece into a pyarrow.RecordBatch of the source's schema, by
`quafka.spark.record_columns.acquired_arrow_batches` (vectorized: one Python walk over the records'
length varints, numpy for every field) against the record-at-a-time path it replaced
(`AcquiredBatches.columns()` + `quafka.spark.arrow.columns_batch`).

The piece: `--batches` uncompressed v2 record batches of `--per-batch` records each, values of
`--value-bytes` bytes, no key, no headers (what benchmarks/spark.py produces), all acquired. Each
round times both paths once, in alternating order, after one untimed warm-up of each; it prints µs
per record for each and the ratio per round, then the median ratio. No broker, no Spark.

    .venv/bin/python benchmarks/spark_decode.py              # 100 batches x 1,000 records, 5 rounds
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--per-batch", type=int, default=1000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from quafka.client import AcquiredBatches
    from quafka.protocol import record_batch as rb
    from quafka.spark.arrow import columns_batch
    from quafka.spark.record_columns import acquired_arrow_batches

    data = bytearray()
    offset = 0
    for _ in range(args.batches):
        batch = bytearray(rb.build_batch([(None, b"x" * args.value_bytes)] * args.per_batch,
                                         base_timestamp=1_700_000_000_000))
        rb.stamp_base_offset(batch, 0, offset)
        data += batch
        offset += args.per_batch
    item = AcquiredBatches("t", 0, bytes(data), [(0, offset - 1, 1)])

    def vectorized() -> int:
        return sum(b.num_rows for b in acquired_arrow_batches(item))

    def record_at_a_time() -> int:
        return columns_batch("t", 0, item.columns()).num_rows

    assert vectorized() == record_at_a_time() == offset  # warm-up (imports) and a check
    ratios = []
    print(f"{offset:,} records of {args.value_bytes} B in {args.batches} batches")
    print(f"{'round':>5} {'vectorized µs/rec':>18} {'record-at-a-time µs/rec':>24} {'ratio':>6}")
    for r in range(args.rounds):
        times = {}
        for name, fn in ((("v", vectorized), ("r", record_at_a_time)) if r % 2 == 0
                         else (("r", record_at_a_time), ("v", vectorized))):
            t0 = time.perf_counter()
            fn()
            times[name] = (time.perf_counter() - t0) / offset * 1e6
        ratios.append(times["r"] / times["v"])
        print(f"{r + 1:>5} {times['v']:>18.2f} {times['r']:>24.2f} {ratios[-1]:>5.1f}x")
    print(f"median ratio {statistics.median(ratios):.1f}x (record-at-a-time / vectorized)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
