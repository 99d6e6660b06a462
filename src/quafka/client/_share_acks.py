"""The share consumer's acknowledgement book (sans-I/O).

A record a poll returned is *delivered*: it stays in the book until the application's
acknowledgement for it is sent. The book answers the questions of Kafka's acknowledgement rules:

- implicit mode: ``accept_delivered()`` turns every delivered record without an acknowledgement
  into ACCEPT (the next poll or commit does this); ``acknowledge`` is refused;
- explicit mode: ``unacknowledged()`` lists delivered records without an acknowledgement (the next
  poll refuses to run while there are any); ``acknowledge`` and ``acknowledge_range`` record a type
  for delivered records;
- a record whose deserialization failed is *failed*: the application may acknowledge it by
  topic, partition and offset; otherwise it is RELEASEd with the next poll or commit;
- acknowledgements the consumer makes on its own (GAP for offsets without a record, REJECT for a
  corrupt batch, RELEASE for buffered records of a revoked partition) go straight to *pending*.

``take_pending(partitions)`` hands the pending acknowledgements of some partitions to the sender as
``(first_offset, last_offset, type)`` ranges and forgets delivered records acknowledged other than
RENEW. A RENEW follows Kafka's client (KAFKA-19845; ShareInFlightBatch.takeAcknowledgedRecords,
renew and takeRenewals, ShareFetch.renew and takeRenewedRecords, ShareConsumerImpl.collect):

- sending it (a commit, or the poll that carries it) moves the record from in flight to *renewing*
  (Kafka's ``renewingRecords``): it stays delivered with the value RENEWING, which is not
  UNACKNOWLEDGED, so the next poll's explicit-mode check does not count it;
- the broker's confirmation (``on_renewed``) makes it *renewed* (Kafka's ``renewedRecords``): the
  next poll hands it out again (``take_renewed``, Kafka's ``takeRenewals``), same Record, same
  delivery count, and it is UNACKNOWLEDGED (in flight) again; ``renewals_in_flight()`` tells the
  poll that renewals are still unanswered (Kafka's ``hasRenewals``: the poll returns no new records
  then, only renewed ones once confirmed);
- a failed renewal (``on_renew_failed``) ends the delivery: the record is no longer held, neither
  delivered nor renewed, and an earlier confirmation does not bring it back (Kafka drops it from
  ``renewingRecords`` and never puts it back into ``inFlightRecords``).

quafka extension: a renewing or renewed record may still be acknowledged before the next poll hands
it out (RENEW again, or its final ACCEPT/RELEASE/REJECT: the RENEW-from-a-background-thread and
renew-between-steps uses, docs/client.md (f)); Kafka refuses that (``ShareInFlightBatch.acknowledge``
looks only at ``inFlightRecords``). An acknowledgement other than RENEW means it does not come back.
Undecoded deliveries (``poll_batches``) have no Record to hand out again: their RENEWed offsets go
back to UNACKNOWLEDGED when sent, the application still holding them.
``ack_batches`` turns those ranges into the wire's AcknowledgementBatches.

State is kept as ranges, not offsets (``RangeMap``, module ``_ranges``), per partition:

- ``delivered``: offset ranges → UNACKNOWLEDGED, RENEWING or the application's type, not yet sent
  (the acknowledged part of the delivered records: one map answers both "is it delivered" and "is
  it acknowledged");
- ``pending`` and ``failed``: offset ranges → type;
- ``records`` and ``renewed``: offset ranges → a record run (below).

A poll that delivers 10,000 consecutive records, their acknowledgement by range (or implicit
ACCEPT), ``take_pending`` and ``ack_batches`` each cost a few range operations, whatever the count.
``on_delivered`` makes one pass over the poll's records to cut them into runs of consecutive offsets
of one partition (the records exist, so that pass is unavoidable); the book's own work is per run.

Records are kept only for what needs them: handing a renewed record out again. Rather than a map
offset → Record (an entry to add per record on every poll and to delete per record on every
commit), the book keeps one tuple of the poll's records (the application owns the list it got)
and maps each run of consecutive offsets to a ``_Run``: that tuple and the index shift of the run,
so the record at offset o is ``records[o - shift]``. The ``records`` map shrinks with ``delivered``
(range removals), and a poll's tuple is freed when no range refers to it any more; records sent
as RENEW get a tuple of their own (a copy of just those), so a renewal keeps only the renewed
records alive, not the rest of their poll. The cost is one tuple copy per poll (C, a pointer per
record) instead of a dict entry per record in and out. poll_batches delivers undecoded ranges: no
records, nothing to hand out again (as before).

Not thread-safe by itself: the consumer guards it with one lock, since a second thread may
acknowledge (the documented RENEW-from-a-background-thread extension).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from itertools import chain, repeat

from ._ranges import RangeMap
from .errors import IllegalStateException
from .records import Record, TopicPartition

__all__ = ["GAP", "AckRange", "AcknowledgeType", "Acknowledgements", "ack_batches", "ack_ranges", "count_offsets",
           "offset_runs"]

#: Acknowledge type 0 on the wire: no record at this offset (a control record or a compacted gap).
GAP = 0

#: The value of delivered offsets the application has not acknowledged (no wire type).
UNACKNOWLEDGED = -1

#: The value of delivered offsets whose RENEW was sent: Kafka's ShareInFlightBatch ``renewingRecords``
#: (unanswered) and ``renewedRecords`` (confirmed; then also in ``renewed``) — not in flight, so not
#: unacknowledged, until the next poll hands them out again (no wire type).
RENEWING = -2

#: ``(first_offset, last_offset, type)``: the offsets first..last all acknowledged with ``type``.
AckRange = tuple[int, int, int]


class AcknowledgeType(IntEnum):
    """How a record is acknowledged (Kafka's AcknowledgeType; wire values 1-4)."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


def ack_ranges(acks: Mapping[int, int]) -> list[AckRange]:
    """offset → type as sorted ranges, touching offsets of one type joined (one pass; the input
    has an entry per offset anyway)."""
    out: list[AckRange] = []
    for offset, ack_type in sorted(acks.items()):
        if out:
            first, last, kind = out[-1]
            if offset == last + 1 and ack_type == kind:
                out[-1] = (first, offset, kind)
                continue
        out.append((offset, offset, ack_type))
    return out


def offset_runs(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Offsets as sorted (first, last) runs of consecutive offsets."""
    out: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if out and offset <= out[-1][1] + 1:
            if offset > out[-1][1]:
                out[-1] = (out[-1][0], offset)
        else:
            out.append((offset, offset))
    return out


def count_offsets(ranges: Iterable[tuple[int, int, int]]) -> int:
    """How many offsets ``(first, last, ...)`` ranges hold."""
    return sum(r[1] - r[0] + 1 for r in ranges)


def ack_batches(acks: Sequence[AckRange] | Mapping[int, int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """Acknowledgements as the wire's [(first_offset, last_offset, types)]: consecutive offsets form
    one batch, and a batch whose offsets share a type sends that type once (else one type per
    offset). ``acks`` are sorted disjoint ``(first, last, type)`` ranges (``take_pending``'s form),
    or a mapping offset → type."""
    if isinstance(acks, Mapping):
        acks = ack_ranges(acks)
    out: list[tuple[int, int, tuple[int, ...]]] = []
    i, n = 0, len(acks)
    while i < n:
        first, last, kind = acks[i]
        one_type = True
        j = i + 1
        while j < n and acks[j][0] == last + 1:
            last = acks[j][1]
            one_type = one_type and acks[j][2] == kind
            j += 1
        if one_type:
            out.append((first, last, (kind,)))
        else:
            out.append((first, last, tuple(chain.from_iterable(repeat(t, l - f + 1) for f, l, t in acks[i:j]))))
        i = j
    return out


def _not_delivered(tp: TopicPartition, offset: int, by: str) -> IllegalStateException:
    return IllegalStateException(f"{tp[0]}-{tp[1]} offset {offset} is not a record delivered to the application "
                                 f"and still unacknowledged (already committed, no longer held after a failed "
                                 f"renewal, or never returned by {by})")


class _Run:
    """Consecutive delivered records of one partition: ``records[offset - shift]`` (identity
    equality, so a RangeMap merges only pieces of the same run)."""

    __slots__ = ("records", "shift")

    def __init__(self, records: tuple[Record, ...], shift: int) -> None:
        self.records = records
        self.shift = shift

    def between(self, first: int, last: int) -> tuple[Record, ...]:
        return self.records[first - self.shift : last - self.shift + 1]


class Acknowledgements:
    """Delivered, failed and pending acknowledgements of one share consumer."""

    def __init__(self, explicit: bool) -> None:
        self.explicit = explicit
        # per partition; a partition's entry goes when its map is empty (except in pending/failed
        # between settle and take, which is harmless)
        self.delivered: dict[TopicPartition, RangeMap] = {}  # → UNACKNOWLEDGED, RENEWING or the app's type, unsent
        self.records: dict[TopicPartition, RangeMap] = {}  # → _Run (decoded deliveries only)
        self.failed: dict[TopicPartition, RangeMap] = {}  # failed deserialization → type (default RELEASE)
        self.pending: dict[TopicPartition, RangeMap] = {}  # ready to send → type
        self.renewed: dict[TopicPartition, RangeMap] = {}  # renewal confirmed → _Run: the next poll returns them
        self._acked: set[TopicPartition] = set()  # partitions whose delivered map may hold the app's types
        self._renewing: set[TopicPartition] = set()  # partitions whose delivered map may hold RENEWING

    # ------------------------------------------------------------------ the application's side

    def on_delivered(self, records: Sequence[Record]) -> None:
        """poll: ``records`` are delivered (runs of one partition, usually consecutive offsets)."""
        kept = tuple(records)
        i, n = 0, len(kept)
        while i < n:
            record = kept[i]
            topic, partition, first = record.topic, record.partition, record.offset
            j, following = i + 1, first + 1
            while j < n:
                record = kept[j]
                if record.offset != following or record.partition != partition or record.topic != topic:
                    break
                j += 1
                following += 1
            tp = TopicPartition(topic, partition)
            delivered = self._delivered_of(tp)
            delivered.fill(first, following - 1, UNACKNOWLEDGED)
            if tp in self._renewing:
                self._redelivered(tp, delivered, first, following - 1)
            records_map = self.records.get(tp)
            if records_map is None:
                records_map = self.records[tp] = RangeMap()
            records_map.assign(first, following - 1, _Run(kept, first - i))
            i = j

    def on_delivered_ranges(self, tp: TopicPartition, ranges: Iterable[tuple[int, int, int]]) -> None:
        """poll_batches: the acquired ``(first, last, delivery count)`` ranges are delivered
        (undecoded: no Record kept)."""
        delivered = self._delivered_of(tp)
        records = self.records.get(tp)
        for first, last, _count in ranges:
            delivered.fill(first, last, UNACKNOWLEDGED)
            if tp in self._renewing:
                self._redelivered(tp, delivered, first, last)
            if records is not None:
                records.remove(first, last)

    def _redelivered(self, tp: TopicPartition, delivered: RangeMap, first: int, last: int) -> None:
        """``first..last`` delivered anew: what was renewing is in flight again, with this delivery
        (a renewal confirmed earlier no longer hands out the former one)."""
        for f, l, value in delivered.ranges(first, last):
            if value == RENEWING:
                delivered.assign(f, l, UNACKNOWLEDGED)
        self._forget_renewed(tp, first, last)

    def _delivered_of(self, tp: TopicPartition) -> RangeMap:
        delivered = self.delivered.get(tp)
        if delivered is None:
            delivered = self.delivered[TopicPartition(*tp)] = RangeMap()
        return delivered

    def acknowledge_range(self, tp: TopicPartition, first: int, last: int, ack_type: int) -> None:
        """Acknowledge every offset of ``first..last`` (all delivered and unacknowledged-able)."""
        if not self.explicit:
            raise IllegalStateException("acknowledge_range() needs share.acknowledgement.mode=explicit")
        delivered = self.delivered.get(tp)
        missing = first if delivered is None else delivered.first_gap(first, last)
        if missing is not None:
            raise _not_delivered(tp, missing, "poll_batches()")
        delivered.assign(first, last, ack_type)
        self._acked.add(TopicPartition(*tp))
        if ack_type != AcknowledgeType.RENEW:
            self._forget_renewed(tp, first, last)

    def on_failed(self, tp: TopicPartition, offset: int) -> None:
        failed = self.failed.get(tp)
        if failed is None:
            failed = self.failed[TopicPartition(*tp)] = RangeMap()
        failed.assign(offset, offset, AcknowledgeType.RELEASE)

    def acknowledge(self, tp: TopicPartition, offset: int, ack_type: int, *, by_record: bool) -> None:
        """Record the application's acknowledgement (``ack_type`` already checked to be 1-4).
        ``tp`` may be a plain (topic, partition) tuple."""
        if self.failed and not by_record:
            failed = self.failed.get(tp)
            if failed is not None and offset in failed:
                if ack_type == AcknowledgeType.RENEW:
                    raise IllegalStateException(f"{tp[0]}-{tp[1]} offset {offset} failed deserialization "
                                                f"and cannot be renewed; acknowledge it ACCEPT, RELEASE or REJECT")
                failed.assign(offset, offset, ack_type)
                return
        if not self.explicit:
            raise IllegalStateException("acknowledge() needs share.acknowledgement.mode=explicit; in implicit mode "
                                        "the next poll() or commit accepts the delivered records")
        delivered = self.delivered.get(tp)
        if delivered is None or offset not in delivered:
            raise _not_delivered(tp, offset, "poll()")
        delivered.assign(offset, offset, ack_type)
        if tp not in self._acked:
            self._acked.add(TopicPartition(*tp))
        if ack_type != AcknowledgeType.RENEW:
            self._forget_renewed(tp, offset, offset)

    def _forget_renewed(self, tp: TopicPartition, first: int, last: int) -> None:
        if self.renewed:
            renewed = self.renewed.get(tp)
            if renewed is not None:
                renewed.remove(first, last)
                if not renewed:
                    del self.renewed[tp]

    def unacknowledged(self, limit: int | None = None) -> list[tuple[TopicPartition, int]]:
        """Delivered records the application has not acknowledged (explicit mode's poll check,
        Kafka's ShareInFlightBatch.checkAllInFlightAreAcknowledged), by partition in offset order;
        at most ``limit`` of them. Records whose RENEW was sent are not in flight (RENEWING, Kafka's
        renewingRecords/renewedRecords): not counted, whether the renewal is answered or not."""
        out: list[tuple[TopicPartition, int]] = []
        for tp, delivered in self.delivered.items():
            for first, last, value in delivered:
                if value == UNACKNOWLEDGED:
                    if limit is not None:
                        last = min(last, first + limit - len(out) - 1)
                    out.extend((tp, offset) for offset in range(first, last + 1))
                    if limit is not None and len(out) >= limit:
                        return out
        return out

    def unacknowledged_count(self) -> int:
        """How many delivered records the application has not acknowledged."""
        return sum(last - first + 1 for delivered in self.delivered.values()
                   for first, last, value in delivered if value == UNACKNOWLEDGED)

    # ------------------------------------------------------------------ the consumer's side

    def accept_delivered(self) -> None:
        """Implicit mode: every delivered record without an acknowledgement is ACCEPTed."""
        for tp, delivered in self.delivered.items():
            delivered.replace(UNACKNOWLEDGED, AcknowledgeType.ACCEPT)
            self._acked.add(tp)

    def settle_failed(self) -> None:
        """Failed records get their acknowledgement (the application's, else RELEASE)."""
        for tp, failed in self.failed.items():
            pending = self._pending_of(tp)
            for first, last, ack_type in failed:
                pending.assign(first, last, ack_type)
        self.failed.clear()

    def _pending_of(self, tp: TopicPartition) -> RangeMap:
        pending = self.pending.get(tp)
        if pending is None:
            pending = self.pending[TopicPartition(*tp)] = RangeMap()
        return pending

    def add_pending(self, tp: TopicPartition, acks: Mapping[int, int]) -> None:
        """The consumer's own acknowledgements, offset → type."""
        if acks:
            self.add_pending_ranges(tp, ack_ranges(acks))

    def add_pending_ranges(self, tp: TopicPartition, ranges: Iterable[AckRange]) -> None:
        """The consumer's own acknowledgements, as ``(first, last, type)`` ranges."""
        pending = None
        for first, last, ack_type in ranges:
            if pending is None:
                pending = self._pending_of(tp)
            pending.assign(first, last, ack_type)

    def add_pending_offsets(self, tp: TopicPartition, offsets: Iterable[int], ack_type: int) -> None:
        """The consumer's own acknowledgements: ``ack_type`` for each of ``offsets``."""
        self.add_pending_ranges(tp, ((first, last, ack_type) for first, last in offset_runs(offsets)))

    def _move_acked(self) -> None:
        """The application's acknowledgements become pending; what they acknowledged other than
        RENEW is no longer delivered; a RENEWed record becomes RENEWING (Kafka's
        ShareInFlightBatch.takeAcknowledgedRecords: from inFlightRecords into renewingRecords), an
        undecoded one (no Record to hand out again) UNACKNOWLEDGED."""
        for tp in self._acked:
            delivered = self.delivered.get(tp)
            if delivered is None:
                continue
            acked = [piece for piece in delivered if piece[2] > 0]  # the app's types (not UNACKNOWLEDGED, RENEWING)
            if not acked:
                continue
            pending = self._pending_of(tp)
            records = self.records.get(tp)
            for first, last, ack_type in acked:
                pending.assign(first, last, ack_type)
                if ack_type == AcknowledgeType.RENEW:
                    delivered.assign(first, last, UNACKNOWLEDGED)
                    if records is not None:  # a tuple of their own: the rest of the poll's can go
                        for run_first, run_last, run in records.ranges(first, last):
                            records.assign(run_first, run_last, _Run(run.between(run_first, run_last), run_first))
                            delivered.assign(run_first, run_last, RENEWING)
                            self._renewing.add(tp)
                else:
                    delivered.remove(first, last)
                    if records is not None:
                        records.remove(first, last)
            if not delivered:
                self._forget_delivered(tp)
        self._acked.clear()

    def _forget_delivered(self, tp: TopicPartition) -> None:
        self.delivered.pop(tp, None)
        self.records.pop(tp, None)
        self._renewing.discard(tp)

    def has_pending(self, renew_only: bool = False) -> bool:
        self._move_acked()
        if renew_only:
            return any(ack_type == AcknowledgeType.RENEW
                       for pending in self.pending.values() for _f, _l, ack_type in pending)
        return any(self.pending.values())

    def pending_partitions(self) -> set[TopicPartition]:
        """Partitions with acknowledgements ready to send (``has_pending`` first moves the
        application's there)."""
        return {tp for tp, pending in self.pending.items() if pending}

    def take_pending(self, partitions: set[TopicPartition] | None = None) -> dict[TopicPartition, list[AckRange]]:
        """The pending acknowledgements of ``partitions`` (None: all) as sorted ``(first_offset,
        last_offset, type)`` ranges, removed from the book."""
        self._move_acked()
        out: dict[TopicPartition, list[AckRange]] = {}
        for tp in list(self.pending):
            if partitions is None or tp in partitions:
                pending = self.pending.pop(tp)
                if pending:
                    out[tp] = pending.ranges()
        return out

    def on_renewed(self, tp: TopicPartition, ranges: Iterable[tuple[int, ...]]) -> None:
        """The broker confirmed the renewals of the ``(first, last, ...)`` ranges: their RENEWING
        records are renewed and come back with the next poll (unless the application acknowledged
        them since), as Kafka's ShareInFlightBatch.renew moves them from renewingRecords to
        renewedRecords."""
        records = self.records.get(tp)
        delivered = self.delivered.get(tp)
        if records is None or delivered is None:
            return
        renewed = None
        for first, last, *_ in ranges:
            for run_first, run_last, run in records.ranges(first, last):
                for f, l, value in delivered.ranges(run_first, run_last):
                    if value == RENEWING:
                        if renewed is None:
                            renewed = self.renewed.get(tp)
                            if renewed is None:
                                renewed = self.renewed[TopicPartition(*tp)] = RangeMap()
                        renewed.assign(f, l, run)

    def on_renew_failed(self, tp: TopicPartition, ranges: Iterable[tuple[int, ...]]) -> None:
        """The renewal of the ``(first, last, ...)`` ranges failed (lock expired, renewal disabled,
        share session lost with a broker restart): their records are no longer the application's to
        acknowledge, and no poll hands them out again, even one an earlier renewal had confirmed (as
        Kafka's ShareInFlightBatch.renew: a record whose renewal completed exceptionally is dropped
        from renewingRecords and never returns to inFlightRecords, so acknowledge() refuses it)."""
        for first, last, *_ in ranges:
            self._forget_renewed(tp, first, last)
        delivered = self.delivered.get(tp)
        if delivered is None:
            return
        records = self.records.get(tp)
        for first, last, *_ in ranges:
            for f, l, value in delivered.ranges(first, last):
                if value == RENEWING or value == UNACKNOWLEDGED:  # UNACKNOWLEDGED: undecoded, or handed out again
                    delivered.remove(f, l)
                    if records is not None:
                        records.remove(f, l)
        if not delivered:
            self._forget_delivered(tp)

    def take_renewed(self) -> list[Record]:
        """The renewed records, for the poll to hand out again: they are in flight again
        (UNACKNOWLEDGED; Kafka's ShareInFlightBatch.takeRenewals, renewedRecords into
        inFlightRecords), so the poll after that needs their acknowledgement."""
        out: list[Record] = []
        for tp, renewed in self.renewed.items():
            delivered = self.delivered.get(tp)
            for first, last, run in renewed:
                out.extend(run.between(first, last))
                if delivered is not None:
                    for f, l, value in delivered.ranges(first, last):
                        if value == RENEWING:
                            delivered.assign(f, l, UNACKNOWLEDGED)
        self.renewed = {}
        return out

    def renewals_in_flight(self) -> bool:
        """Whether some sent RENEW is unanswered (RENEWING, not renewed yet: Kafka's
        renewingRecords, part of ShareFetch.hasRenewals)."""
        for tp in list(self._renewing):
            delivered = self.delivered.get(tp)
            renewed = self.renewed.get(tp)
            holds = False
            for first, last, value in delivered or ():
                if value == RENEWING:
                    holds = True
                    if renewed is None or renewed.first_gap(first, last) is not None:
                        return True
            if not holds and tp not in self.renewed:
                self._renewing.discard(tp)
        return False

    def drop_partitions(self, partitions: set[TopicPartition]) -> None:
        """Forget delivered records of partitions whose acknowledgements can no longer be sent."""
        for tp in partitions:
            self._forget_delivered(tp)
            self.renewed.pop(tp, None)
            self._acked.discard(tp)
            self._renewing.discard(tp)
