"""Deliberately planted bugs, to show that the simulator finds them (`--plant NAME`).

Each is a monkeypatch inside the simulation process, undone when the run ends:

- ``ack-before-append``: `ShareCoordinatorService.write` answers success at once and performs the real
  write 50 ms – 2 s later (or never, if the broker crashes first), so a ShareAcknowledge /
  piggy-backed acknowledgement is answered before its share-state records are appended.
  Expected: ``redelivered-after-ack`` after a crash.
- ``forget-accept-on-restart``: `ShareCoordinatorService.read` (the share partition loading its state,
  as after a restart) turns ACKNOWLEDGED state batches back into AVAILABLE, so an ACCEPT that was
  made durable is forgotten. Expected: ``redelivered-after-ack``.
- ``commit-before-durable``: `ConsumerOffsetsService.commit` answers NONE at once and makes the
  commit 50 ms – 2 s later (or never, if the broker crashes first). Expected:
  ``committed-offset-lost`` (or ``-backwards``).
- ``assign-unreleased``: the KIP-848 reconciliation gives a member partitions that another member
  still owns (as if no partition had an owner). Expected: ``partition-owned-twice``.
- ``dead-letter-skipped``: the DLQ writer drops every other write, the first one included (the
  records are archived with no dead letter). Expected: ``dead-letter-missing``.
- ``fetch-for-gone-client``: the share fetch path forgets that a session can end while a request
  waits (`ShareSessionCache.is_live` always true, `SharePartitionManager.session_ended` neither
  wakes the parked fetch nor hands back what it acquired): a parked ShareFetch whose client
  dropped its connection acquires records for nobody (issue 28, item 1). Expected:
  ``delivery-count-skipped``.
- ``marker-first-partition-only``: the transaction coordinator's marker writer
  (`txn_markers.write_txn_markers`) writes the COMMIT/ABORT marker to the first partition of a
  transaction only and reports every partition written, so the coordinator completes the
  transaction. Expected: ``txn-half-committed`` (or ``txn-commit-lost``, ``txn-never-completed``).
- ``lso-at-high-watermark``: `PartitionState.last_stable_offset` is the high watermark, open
  transactions or not, so read_committed readers see records of transactions still open.
  Expected: ``uncommitted-visible-read-committed``.
- ``aborted-list-empty``: `PartitionState.aborted_transactions` finds none, so a read_committed
  Fetch lists no aborted transaction and its consumer keeps their records. Expected:
  ``aborted-visible-read-committed``.
- ``dead-letter-twice-on-reload``: the DLQ writer does not look for dead letters written before a
  crash when it writes recovered ARCHIVING records again. Expected: ``dead-letter-duplicated``;
  it needs a crash between a DLQ write and its ARCHIVED state write, so it is for campaigns, not
  for the CI slice (`CI_PLANTS`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Callable

from quafka.broker.core import consumer_group
from quafka.broker.server.consumer_offsets import ConsumerOffsetsService
from quafka.broker.server.dead_letter_writer import DeadLetterWriter
from quafka.broker.server.share_coordinator import ShareCoordinatorService
from quafka.protocol.errors import ErrorCode

ACKNOWLEDGED, AVAILABLE = 2, 0

# plant -> the invariants that may catch it
PLANTS = {
    # state writes answered before they are appended: with a DLQ, a record archived twice is
    # dead-lettered twice (seed 0 of the CI slice shows that first)
    "ack-before-append": ("redelivered-after-ack", "dead-letter-duplicated"),
    "forget-accept-on-restart": ("redelivered-after-ack",),
    "commit-before-durable": ("committed-offset-lost", "committed-offset-backwards"),
    "assign-unreleased": ("partition-owned-twice",),
    "dead-letter-skipped": ("dead-letter-missing",),
    "dead-letter-twice-on-reload": ("dead-letter-duplicated",),
    "fetch-for-gone-client": ("delivery-count-skipped",),
    "marker-first-partition-only": ("txn-half-committed", "txn-commit-lost", "txn-never-completed"),
    "lso-at-high-watermark": ("uncommitted-visible-read-committed",),
    "aborted-list-empty": ("aborted-visible-read-committed",),
}
CI_PLANTS = tuple(p for p in PLANTS if p != "dead-letter-twice-on-reload")


def install(name: str, world) -> Callable[[], None]:
    if name == "ack-before-append":
        return _ack_before_append(random.Random(world.seed ^ 0xB06))
    if name == "forget-accept-on-restart":
        return _forget_accept_on_restart()
    if name == "fetch-for-gone-client":
        return _fetch_for_gone_client()
    if name == "commit-before-durable":
        return _commit_before_durable(random.Random(world.seed ^ 0xC0))
    if name == "assign-unreleased":
        return _assign_unreleased()
    if name == "dead-letter-skipped":
        return _dead_letter_skipped()
    if name == "dead-letter-twice-on-reload":
        return _dead_letter_twice_on_reload()
    if name == "marker-first-partition-only":
        return _marker_first_partition_only()
    if name == "lso-at-high-watermark":
        return _lso_at_high_watermark()
    if name == "aborted-list-empty":
        return _aborted_list_empty()
    raise ValueError(f"unknown plant {name!r}; known: {', '.join(PLANTS)}")


def _commit_before_durable(rng: random.Random) -> Callable[[], None]:
    original = ConsumerOffsetsService.commit

    async def commit(self, request):
        loop = asyncio.get_running_loop()

        def later() -> None:
            task = loop.create_task(original(self, request))
            task.add_done_callback(lambda f: f.cancelled() or f.exception())

        loop.call_later(rng.uniform(0.05, 2.0), later)
        return {(p.topic, p.partition): ErrorCode.none for p in request.partitions}

    ConsumerOffsetsService.commit = commit

    def undo() -> None:
        ConsumerOffsetsService.commit = original

    return undo


def _assign_unreleased() -> Callable[[], None]:
    original = consumer_group.reconcile

    def reconcile(member, **kwargs):
        kwargs["partition_epoch"] = lambda topic_id, partition: -1
        return original(member, **kwargs)

    consumer_group.reconcile = reconcile

    def undo() -> None:
        consumer_group.reconcile = original

    return undo


def _dead_letter_skipped() -> Callable[[], None]:
    original = DeadLetterWriter.write
    calls = [0]

    async def write(self, ctx, writes):
        calls[0] += 1
        if calls[0] % 2 == 1:
            return 0
        return await original(self, ctx, writes)

    DeadLetterWriter.write = write

    def undo() -> None:
        DeadLetterWriter.write = original

    return undo


def _dead_letter_twice_on_reload() -> Callable[[], None]:
    original = DeadLetterWriter._written_before  # noqa: SLF001

    async def written_before(self, dlq_log, ctx):
        return set()

    DeadLetterWriter._written_before = written_before  # noqa: SLF001

    def undo() -> None:
        DeadLetterWriter._written_before = original  # noqa: SLF001

    return undo


def _ack_before_append(rng: random.Random) -> Callable[[], None]:
    original = ShareCoordinatorService.write

    def write(self, key, **kwargs):
        loop = asyncio.get_running_loop()
        answered = loop.create_future()
        answered.set_result(ErrorCode.none)

        def later() -> None:
            result = original(self, key, **kwargs)
            if isinstance(result, asyncio.Future):
                result.add_done_callback(lambda f: f.cancelled() or f.exception())
            elif asyncio.iscoroutine(result):
                task = loop.create_task(result)
                task.add_done_callback(lambda f: f.cancelled() or f.exception())

        loop.call_later(rng.uniform(0.05, 2.0), later)
        return answered

    ShareCoordinatorService.write = write

    def undo() -> None:
        ShareCoordinatorService.write = original

    return undo


def _forget_accept_on_restart() -> Callable[[], None]:
    original = ShareCoordinatorService.read

    def forget(result):
        batches = getattr(result, "state_batches", None)
        if not batches:
            return result
        changed = tuple(b._replace(delivery_state=AVAILABLE) if b.delivery_state == ACKNOWLEDGED else b
                        for b in batches)
        return dataclasses.replace(result, state_batches=changed)

    def read(self, key, *args, **kwargs):
        result = original(self, key, *args, **kwargs)
        if isinstance(result, asyncio.Future):
            out = asyncio.get_running_loop().create_future()

            def relay(f: asyncio.Future) -> None:
                if f.cancelled():
                    out.cancel()
                elif f.exception() is not None:
                    out.set_exception(f.exception())
                else:
                    out.set_result(forget(f.result()))

            result.add_done_callback(relay)
            return out
        if asyncio.iscoroutine(result):
            async def wrapped():
                return forget(await result)
            return wrapped()
        return forget(result)

    ShareCoordinatorService.read = read

    def undo() -> None:
        ShareCoordinatorService.read = original

    return undo


def _fetch_for_gone_client() -> Callable[[], None]:
    from quafka.broker.core.share_session import ShareSessionCache
    from quafka.broker.server.share_partitions import SharePartitionManager

    real_live, real_ended = ShareSessionCache.is_live, SharePartitionManager.session_ended
    ShareSessionCache.is_live = lambda self, session: True
    SharePartitionManager.session_ended = lambda self, session: None

    def undo() -> None:
        ShareSessionCache.is_live, SharePartitionManager.session_ended = real_live, real_ended
    return undo


def _marker_first_partition_only() -> Callable[[], None]:
    from quafka.broker.server import txn_markers

    original = txn_markers.write_txn_markers

    async def write_txn_markers(server, producer_id, producer_epoch, coordinator_epoch, committed, partitions):
        partitions = sorted(partitions)
        written = await original(server, producer_id, producer_epoch, coordinator_epoch, committed, partitions[:1])
        return {tp: written.get(tp, ErrorCode.none) for tp in partitions}

    txn_markers.write_txn_markers = write_txn_markers

    def undo() -> None:
        txn_markers.write_txn_markers = original

    return undo


def _lso_at_high_watermark() -> Callable[[], None]:
    from quafka.broker.server.state import PartitionState

    original = PartitionState.last_stable_offset
    PartitionState.last_stable_offset = property(lambda self: self.log.log_end_offset)

    def undo() -> None:
        PartitionState.last_stable_offset = original

    return undo


def _aborted_list_empty() -> Callable[[], None]:
    from quafka.broker.server.state import PartitionState

    original = PartitionState.aborted_transactions
    PartitionState.aborted_transactions = lambda self, start_offset, end_offset: []

    def undo() -> None:
        PartitionState.aborted_transactions = original

    return undo
