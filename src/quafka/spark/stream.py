"""The share-group streaming source of ``spark.readStream.format("quafka")``: design A of
spark-notes §6.1, "runner-owned share session plus fan-out".

Where things run (spark-notes §2): the long-lived runner process of the query calls
``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` on one reader object; executors
call ``read`` on an unpickled copy made by a planner. So:

- The runner owns one ``quafka.client.ShareConsumer`` (explicit acknowledgement mode), created
  lazily on the first runner call — never in ``__init__`` — and dropped by ``__getstate__``.
- ``latestOffset(start, limit)`` first ACCEPTs (and ``commit_sync``s) every pending batch with
  ``seq <= start.seq``: Spark calls it only once the batch ending at ``start`` is in the commit log,
  and it calls ``commit()`` for that batch only after this (``MicroBatchExecution.constructNextBatch``
  commits the previous batch's end once the next one is planned); it also runs on every trigger, so
  the last batch before an idle stretch is acknowledged too (the commit-timing trap, spark-notes §0). Then one long poll (~0.5 s) acquires
  up to the limit — ``poll_batches``, so the runner decodes nothing: it gets the record bytes and
  the acquired ranges (``AcquiredBatches``) and acknowledges by range — ; they are cached under
  ``seq + 1`` and the end offset returned carries the acquired offset ranges, so the checkpoint's
  ``offsets/`` log names them durably::

      {"v": 1, "seq": 7, "member": "<member id>",
       "acq": {"<topic>:<partition>": [[first, last, deliveryCount], ...]}}

- ``partitions(start, end)``: a cache hit cuts the cached batches at record-batch boundaries
  (sharing a batch only when there are fewer batches than tasks) into ``numPartitions`` partitions (default ``spark.default.parallelism``, read from the driver JVM's
  launch configuration by ``parallelism.py``) that carry them undecoded (more tasks than the
  topic has partitions); the executors decode them in parallel and yield ``pyarrow.RecordBatch``es.
  A cache miss (a replay after a restart) gives partitions carrying offset ranges that executors
  read with ``quafka.client.PartitionReader`` (plain Fetch, no group); so does ``executorFetch``
  (``auto``: on any master but a local one), which keeps no record bytes in the runner. Either way
  the executors decode into Arrow columns in bulk (``record_columns.py``). A record batch that fails
  its CRC check or does not decode fails the task (as in Spark's Kafka source).
- ``commit(end)`` ACCEPTs what is still pending with ``seq <= end.seq`` (normally nothing, see
  above). Every ACCEPT is waited for (``commit_sync``) before the next poll: the poll must find the
  in-flight room freed (an ACCEPT sent without waiting raced the next ShareFetch and left
  micro-batches a fraction of the trigger's size).
- A daemon thread RENEWs the locks of pending batches every third of the lock duration
  (``acquisition_lock_timeout_ms()``), so a batch that runs longer than the lock is neither
  redelivered nor duplicated.
- The runner ends with its driver (``lifetime.py``): on SIGTERM (the JVM ends the runner with
  SIGTERM on ``query.stop()``; ``stop()`` is never called), when the driver JVM exits, and when it
  closes its socket to the runner, the consumer is closed first — which releases the records not
  yet acknowledged — for at most ``lifetime.CLOSE_S``.

Acquire mode: ``share.acquire.mode=record_limit`` with ``max.poll.records`` set to the trigger's
limit, so one poll never returns more than ``maxRecordsPerTrigger`` records (``batch_optimized``
may hand out whole record batches, all of which would have to ride in the micro-batch because in
explicit mode every record of a poll must be acknowledged before the next poll).

Unsupported: ``asyncProgressTrackingEnabled`` (a ``writeStream`` option the source cannot see; it
would let Spark run batch N+1 before batch N is in the commit log, breaking at-least-once — it is
refused when given to ``readStream``), continuous triggers, two queries on one checkpoint. Records
are ACCEPTed a whole batch at a time; per-record RELEASE/REJECT is not expressible.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .record_columns import acquired_arrow_batches, fetched_arrow_batches
from .lifetime import end_with_driver
from .options import OptionError, Options
from .worker_process import settle_worker_process

__all__ = ["QuafkaShareStreamReader"]

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 0.5
COMMIT_TIMEOUT_S = 30.0
DEFAULT_MAX_RECORDS = 10000
DEFAULT_LOCK_MS = 30000
FALLBACK_PARALLELISM = 2
_FORCED = {"share.acknowledgement.mode": "explicit", "share.acquire.mode": "record_limit"}


# ---------------------------------------------------------------------------------- partitions

class RowsPartition(InputPartition):
    """Records fanned out by the runner, undecoded: ``quafka.client.AcquiredBatches`` pieces (whole
    record batches plus the acquired offset ranges they cover). The executor decodes them."""

    def __init__(self, index: int, pieces: list) -> None:
        super().__init__(index)
        self.index = index
        self.pieces = pieces


class RangesPartition(InputPartition):
    """A replay by offset: [(topic, partition, first, last, deliveryCount | None), ...]."""

    def __init__(self, index: int, bootstrap: str, ranges: list[tuple],
                 security: dict[str, Any] | None = None) -> None:
        super().__init__(index)
        self.index = index
        self.bootstrap = bootstrap
        self.ranges = ranges
        self.security = dict(security or {})  # the kafka.security.protocol, kafka.ssl.*, kafka.sasl.* options


def compact_ranges(items: list[Any]) -> dict[str, list[list[int]]]:
    """{"topic:partition": [[first, last, deliveryCount], ...]} from ``AcquiredBatches``: adjacent
    ranges with the same delivery count merged."""
    out: dict[str, list[list[int]]] = {}
    for item in sorted(items, key=lambda i: (i.topic, i.partition, i.acquired[0][0] if i.acquired else 0)):
        ranges = out.setdefault(f"{item.topic}:{item.partition}", [])
        for first, last, dc in item.acquired:
            if ranges and ranges[-1][1] + 1 == first and ranges[-1][2] == dc:
                ranges[-1][1] = last
            else:
                ranges.append([first, last, dc])
    return out


def fan_out(items: list[Any], n: int) -> list[list[Any]]:
    """``AcquiredBatches`` cut into ``n`` groups of about equal acquired-offset counts (more tasks
    than topic partitions), or one per offset when there are fewer. Cuts fall at record-batch
    boundaries; only when there are fewer batches than groups is a batch shared by pieces (each
    decodes it and keeps its own offsets)."""
    total = sum(item.count for item in items)
    if not total:
        return []
    target = -(-total // n)
    pieces = [piece for item in items for piece in item.split(target)]
    while len(pieces) < n:
        i = max(range(len(pieces)), key=lambda k: pieces[k].count)
        big = pieces[i]
        if big.count < 2:
            break
        half = -(-big.count // 2)
        parts = big.split(half)
        pieces[i:i + 1] = parts if len(parts) > 1 else big.share(half)
    groups: list[list[Any]] = []
    filled = 0
    for k, piece in enumerate(pieces):
        # a new group when this one is full, or when every piece left must open its own group
        if not groups or (len(groups) < n and (filled >= target or len(pieces) - k <= n - len(groups))):
            groups.append([])
            filled = 0
        groups[-1].append(piece)
        filled += piece.count
    return groups


def _split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


@dataclass
class _Batch:
    seq: int
    end: dict
    items: list = field(default_factory=list)  # quafka.client.AcquiredBatches


# ---------------------------------------------------------------------------------- the reader

class QuafkaShareStreamReader(DataSourceStreamReader):
    """At-least-once streaming source over a share group (see the module docstring)."""

    def __init__(self, options: Options, schema: StructType) -> None:
        if not isinstance(options, Options):
            options = Options(options)
        self.schema = schema
        self.bootstrap = options.bootstrap_servers()
        self.topics = options.topics()
        self.group = options.required("share.group", "the share group the streaming source consumes through")
        self.max_records = options.integer("maxRecordsPerTrigger", DEFAULT_MAX_RECORDS)
        self.num_partitions = options.integer("numPartitions", 0) or None  # None: resolved in the runner
        fetch = (options.get("executorFetch") or "auto").strip().lower()
        if fetch not in ("auto", "true", "false"):
            raise OptionError(f"option 'executorFetch'={fetch!r}: expected true, false or auto")
        self.executor_fetch = fetch
        options.refuse(("asyncProgressTrackingEnabled",),
                       "is not supported by the quafka share-group source (at-least-once needs every "
                       "batch in the commit log before the next one is planned)")
        options.refuse(("startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
                        "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
                        "startingOffsetsByTimestampStrategy"),
                       "does not apply to a share-group stream (the group's start offset and "
                       "share.auto.offset.reset decide where it starts)")
        config = options.client_config()
        for key, value in _FORCED.items():
            if key in config and str(config[key]).lower() != value:
                raise OptionError(f"option 'kafka.{key}'={config[key]!r}: the streaming source needs {value!r}")
        config.update(_FORCED)
        config["group.id"] = self.group
        config.setdefault("fetch.max.wait.ms", str(int(POLL_TIMEOUT_S * 1000)))
        config["max.poll.records"] = str(self.max_records)
        self.client_config = config
        from quafka.client import SECURITY_KEYS

        self.security = {k: v for k, v in config.items() if k in SECURITY_KEYS}
        self._init_runtime()

    # ------------------------------------------------------------------ pickling / runtime state

    def _init_runtime(self) -> None:
        self._consumer = None
        self._lock = threading.Lock()  # serialises every consumer call (owner thread, renewer, close)
        self._pending: dict[int, _Batch] = {}
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._default_parallelism: int | None = None
        self._fetch_on_executors: bool | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for key in ("_consumer", "_lock", "_pending", "_renewer", "_stop", "_closed", "_default_parallelism",
                    "_fetch_on_executors"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def _parallelism(self) -> int:
        """numPartitions, else spark.default.parallelism of the driver JVM (``parallelism.py``),
        else 2 — Spark's own minimum for cluster schedulers."""
        if self.num_partitions:
            return self.num_partitions
        if self._default_parallelism is None:
            from .parallelism import runner_default_parallelism

            try:
                self._default_parallelism = runner_default_parallelism() or FALLBACK_PARALLELISM
            except Exception:  # noqa: BLE001 - an unreadable launch configuration: fall back
                log.exception("quafka stream: reading spark.default.parallelism failed")
                self._default_parallelism = FALLBACK_PARALLELISM
        return self._default_parallelism

    def _executors_fetch(self) -> bool:
        """executorFetch: true, false, or auto — true unless the driver JVM's master is local
        (``parallelism.runner_master``; unknown counts as a cluster)."""
        if self._fetch_on_executors is None:
            if self.executor_fetch == "auto":
                from .parallelism import is_local_master, runner_master

                try:
                    master = runner_master()
                except Exception:  # noqa: BLE001 - an unreadable launch configuration: a cluster
                    log.exception("quafka stream: reading spark.master failed")
                    master = None
                self._fetch_on_executors = not is_local_master(master)
            else:
                self._fetch_on_executors = self.executor_fetch == "true"
            log.info("quafka stream: executors %s", "fetch each batch's records by offset" if self._fetch_on_executors
                     else "get each batch's records from the runner")
        return self._fetch_on_executors

    def _member(self):
        if self._consumer is None:
            if self._closed:
                raise RuntimeError("the quafka share consumer was closed (the runner is ending)")
            from quafka.client import ShareConsumer

            consumer = ShareConsumer(self.client_config)
            consumer.subscribe(self.topics)
            self._consumer = consumer
            end_with_driver(self.close)  # SIGTERM, the driver's exit or its closed socket close it
            self._renewer = threading.Thread(target=self._renew_loop, name="quafka-share-renewer", daemon=True)
            self._renewer.start()
        return self._consumer

    # ------------------------------------------------------------------ acknowledgements

    def _ack(self, batches: list[_Batch], ack_type) -> None:
        """Acknowledge every record of ``batches`` and commit_sync; call with self._lock held."""
        consumer = self._consumer
        if consumer is None or not batches:
            return
        from quafka.client import IllegalStateException

        acknowledge = consumer.acknowledge_range
        for batch in batches:
            for item in batch.items:
                for first, last, _count in item.acquired:
                    try:
                        acknowledge(item.topic, item.partition, first, last, ack_type)
                    except IllegalStateException as exc:  # a failed renewal lost them: redelivered, not lost
                        log.warning("quafka stream: %s of %s-%d offsets %d..%d of batch %d skipped: %s", ack_type.name,
                                    item.topic, item.partition, first, last, batch.seq, exc)
        results = consumer.commit_sync(COMMIT_TIMEOUT_S)
        failed = {tp: err for tp, err in results.items() if err is not None}
        if failed:
            log.warning("quafka stream: %s of batches %s failed: %s", ack_type.name,
                        [b.seq for b in batches], failed)

    def _accept_through(self, seq: int) -> None:
        from quafka.client import AcknowledgeType

        with self._lock:
            done = [b for s, b in sorted(self._pending.items()) if s <= seq]
            if not done:
                return
            for b in done:
                del self._pending[b.seq]
            self._ack(done, AcknowledgeType.ACCEPT)

    def _renew_loop(self) -> None:
        from quafka.client import AcknowledgeType

        last = time.monotonic()
        while not self._stop.wait(0.1):
            consumer = self._consumer
            lock_ms = consumer.acquisition_lock_timeout_ms() if consumer is not None else None
            # the lock is known after the first fetch; before that renew often
            interval = max(lock_ms / 3000.0, 0.1) if lock_ms else 0.5
            if time.monotonic() - last < interval:
                continue
            last = time.monotonic()
            try:
                with self._lock:
                    if self._closed or not self._pending:
                        continue
                    self._ack(list(self._pending.values()), AcknowledgeType.RENEW)
            except Exception:  # noqa: BLE001 - keep renewing; a lost lock means a redelivery, not a loss
                log.exception("quafka stream: renewing locks failed")

    def close(self) -> None:
        """Close the consumer: records not yet acknowledged are released to the group."""
        self._stop.set()
        if not self._lock.acquire(timeout=5.0):
            return  # a consumer call is stuck: the broker's lock expiry releases the records
        try:
            consumer, self._consumer = self._consumer, None
            self._closed = True
            self._pending.clear()
            if consumer is not None:
                try:
                    consumer.close(5.0)
                except Exception:  # noqa: BLE001
                    log.exception("quafka stream: closing the share consumer failed")
        finally:
            self._lock.release()

    def stop(self) -> None:
        self.close()

    # ------------------------------------------------------------------ Spark's calls (runner)

    def initialOffset(self) -> dict:
        return {"v": 1, "seq": 0}

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(self.max_records)

    def latestOffset(self, start: dict, limit=None) -> dict:
        seq = int(start.get("seq", 0))
        self._member()
        self._accept_through(seq)
        with self._lock:
            later = [b for s, b in sorted(self._pending.items()) if s > seq]
            if later:
                # planned but not yet run (should not happen): offer the same batch again, never poll
                # with records unacknowledged (explicit mode forbids it)
                return later[-1].end
            cap = self.max_records
            max_rows = getattr(limit, "max_rows", None)
            if max_rows is not None:
                cap = max(1, min(cap, int(max_rows)))
            consumer = self._consumer
            try:
                consumer.config["max.poll.records"] = cap
            except Exception:  # noqa: BLE001 - read-only config: the construction-time cap stays
                pass
            items = consumer.poll_batches(POLL_TIMEOUT_S)
            if not items:
                return start
            end = {"v": 1, "seq": seq + 1, "member": consumer.member_id, "acq": compact_ranges(items)}
            if self._executors_fetch():  # the executors read the records by offset: keep only the ranges
                items = [item._replace(data=b"") for item in items]
            self._pending[seq + 1] = _Batch(seq + 1, end, items)
            return end

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        n = self._parallelism()
        seq = int(end.get("seq", 0))
        batch = self._pending.get(seq)
        if batch is not None and batch.end.get("member") == end.get("member") and not self._executors_fetch():
            groups = fan_out(batch.items, n)
            return [RowsPartition(i, pieces) for i, pieces in enumerate(groups)] or [RowsPartition(0, [])]
        # executorFetch, or a replay after a restart: the executors read the logged ranges by offset
        ranges = []
        for key, spans in (end.get("acq") or {}).items():
            topic, partition = _split_key(key)
            for first, last, dc in spans:
                ranges.append((topic, partition, int(first), int(last), int(dc) if dc else None))
        total = sum(last - first + 1 for _, _, first, last, _ in ranges)
        if not total:
            return [RangesPartition(0, self.bootstrap, [], self.security)]
        size = -(-total // n)
        parts: list[list[tuple]] = [[]]
        room = size
        for topic, partition, first, last, dc in ranges:
            while first <= last:
                if room == 0:
                    parts.append([])
                    room = size
                take = min(room, last - first + 1)
                parts[-1].append((topic, partition, first, first + take - 1, dc))
                first += take
                room -= take
        return [RangesPartition(i, self.bootstrap, p, self.security) for i, p in enumerate(parts)]

    def commit(self, end: dict) -> None:
        # Spark commits a batch after it planned the next, whose latestOffset already ACCEPTed it;
        # what is left is acknowledged and waited for (commit_sync): an ACCEPT sent without waiting
        # raced the next poll, whose ShareFetch then found the in-flight cap still held and acquired
        # a fraction of a batch (measured: 100,000 / 64,799 / 34,102 records instead of 100,000 each)
        self._accept_through(int(end.get("seq", 0)))

    # ------------------------------------------------------------------ executors

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """pyarrow.RecordBatches of RECORD_SCHEMA: the runner's, or read by offset (executorFetch, a replay)."""
        settle_worker_process()
        if isinstance(partition, RowsPartition):
            for piece in partition.pieces:  # a corrupt batch raises: the task fails (as Spark's Kafka source)
                yield from acquired_arrow_batches(piece)
            return
        if not partition.ranges:
            return
        from quafka.client import PartitionReader

        with PartitionReader({"bootstrap.servers": partition.bootstrap, **partition.security}) as reader:
            for topic, part, first, last, dc in partition.ranges:
                yield from fetched_arrow_batches(topic, part, reader.read_raw(topic, part, first, last + 1), dc)
