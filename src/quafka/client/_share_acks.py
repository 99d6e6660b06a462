"""The share consumer's acknowledgement book (sans-I/O).

A record a poll returned is *delivered*: it stays in the book until the application's
acknowledgement for it is sent. The book answers the questions of Kafka's acknowledgement rules:

- implicit mode: ``accept_delivered()`` turns every delivered record without an acknowledgement
  into ACCEPT (the next poll or commit does this); ``acknowledge`` is refused;
- explicit mode: ``unacknowledged()`` lists delivered records without an acknowledgement (the next
  poll refuses to run while there are any); ``acknowledge`` records a type for a delivered record;
- a record whose deserialization failed is *failed*: the application may acknowledge it by
  topic, partition and offset; otherwise it is RELEASEd with the next poll or commit;
- acknowledgements the consumer makes on its own (GAP for offsets without a record, REJECT for a
  corrupt batch, RELEASE for buffered records of a revoked partition) go straight to *pending*.

``take_pending(partitions)`` hands the pending acknowledgements of some partitions to the sender and
forgets delivered records acknowledged other than RENEW; a RENEWed record stays delivered, and is
returned again by the next poll once the broker confirms the renewal (``on_renewed``).
``ack_batches`` turns offset → type into the wire's AcknowledgementBatches.

Not thread-safe by itself: the consumer guards it with one lock, since a second thread may
acknowledge (the documented RENEW-from-a-background-thread extension).
"""

from __future__ import annotations

from enum import IntEnum

from .errors import IllegalStateException
from .records import Record, TopicPartition

__all__ = ["GAP", "AcknowledgeType", "Acknowledgements", "ack_batches"]

#: Acknowledge type 0 on the wire: no record at this offset (a control record or a compacted gap).
GAP = 0


class AcknowledgeType(IntEnum):
    """How a record is acknowledged (Kafka's AcknowledgeType; wire values 1-4)."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


def ack_batches(acks: dict[int, int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """offset → type as [(first_offset, last_offset, types)]: consecutive offsets form one batch,
    and a batch whose offsets share a type sends that type once (else one type per offset)."""
    out: list[tuple[int, int, tuple[int, ...]]] = []
    if not acks:
        return out
    low, high = min(acks), max(acks)
    if high - low + 1 == len(acks):  # one run of offsets, the usual case
        types = set(acks.values())
        if len(types) == 1:
            return [(low, high, (types.pop(),))]
    offsets = sorted(acks)
    i, n = 0, len(offsets)
    while i < n:
        j = i
        while j + 1 < n and offsets[j + 1] == offsets[j] + 1:
            j += 1
        types = [acks[o] for o in offsets[i : j + 1]]
        if all(t == types[0] for t in types):
            out.append((offsets[i], offsets[j], (types[0],)))
        else:
            out.append((offsets[i], offsets[j], tuple(types)))
        i = j + 1
    return out


def _not_delivered(tp: TopicPartition, offset: int, by: str) -> IllegalStateException:
    return IllegalStateException(f"{tp[0]}-{tp[1]} offset {offset} is not a record delivered to the application "
                                 f"and still unacknowledged (already committed, or never returned by {by})")


class Acknowledgements:
    """Delivered, failed and pending acknowledgements of one share consumer."""

    def __init__(self, explicit: bool) -> None:
        self.explicit = explicit
        self.delivered: dict[TopicPartition, dict[int, Record]] = {}
        self.acked: dict[TopicPartition, dict[int, int]] = {}  # app's types for delivered records, unsent
        self.failed: dict[TopicPartition, dict[int, int]] = {}  # failed deserialization → type (default RELEASE)
        self.pending: dict[TopicPartition, dict[int, int]] = {}  # ready to send
        self.renewed: list[Record] = []  # renewal confirmed: the next poll returns them again

    # ------------------------------------------------------------------ the application's side

    def on_delivered(self, records: list[Record]) -> None:
        delivered = self.delivered
        topic, partition, current = None, None, {}
        for record in records:  # records come in runs of one partition
            if record.partition != partition or record.topic != topic:
                topic, partition = record.topic, record.partition
                current = delivered.get((topic, partition))
                if current is None:
                    current = delivered[TopicPartition(topic, partition)] = {}
            current[record.offset] = record

    def on_delivered_ranges(self, tp: TopicPartition, ranges: list[tuple[int, int, int]]) -> None:
        """poll_batches: the acquired offsets are delivered (undecoded: no Record kept)."""
        current = self.delivered.setdefault(TopicPartition(*tp), {})
        for first, last, _count in ranges:
            current.update(dict.fromkeys(range(first, last + 1)))

    def acknowledge_range(self, tp: TopicPartition, first: int, last: int, ack_type: int) -> None:
        """Acknowledge every offset of ``first..last`` (all delivered and unacknowledged-able)."""
        if not self.explicit:
            raise IllegalStateException("acknowledge_range() needs share.acknowledgement.mode=explicit")
        delivered = self.delivered.get(tp)
        missing = next((o for o in range(first, last + 1) if delivered is None or o not in delivered), None)
        if missing is not None:
            raise _not_delivered(tp, missing, "poll_batches()")
        self._acked_of(tp).update(dict.fromkeys(range(first, last + 1), ack_type))

    def _acked_of(self, tp: TopicPartition) -> dict[int, int]:
        acked = self.acked.get(tp)
        if acked is None:
            acked = self.acked[TopicPartition(*tp)] = {}
        return acked

    def on_failed(self, tp: TopicPartition, offset: int) -> None:
        self.failed.setdefault(tp, {})[offset] = AcknowledgeType.RELEASE

    def acknowledge(self, tp: TopicPartition, offset: int, ack_type: int, *, by_record: bool) -> None:
        """Record the application's acknowledgement (``ack_type`` already checked to be 1-4).
        ``tp`` may be a plain (topic, partition) tuple."""
        if self.failed:
            failed = self.failed.get(tp)
            if failed is not None and offset in failed and not by_record:
                if ack_type == AcknowledgeType.RENEW:
                    raise IllegalStateException(f"{tp[0]}-{tp[1]} offset {offset} failed deserialization "
                                                f"and cannot be renewed; acknowledge it ACCEPT, RELEASE or REJECT")
                failed[offset] = ack_type
                return
        if not self.explicit:
            raise IllegalStateException("acknowledge() needs share.acknowledgement.mode=explicit; in implicit mode "
                                        "the next poll() or commit accepts the delivered records")
        delivered = self.delivered.get(tp)
        if delivered is None or offset not in delivered:
            raise _not_delivered(tp, offset, "poll()")
        self._acked_of(tp)[offset] = ack_type
        if self.renewed and ack_type != AcknowledgeType.RENEW:
            self.renewed = [r for r in self.renewed if not (r.offset == offset and r.topic == tp[0]
                                                            and r.partition == tp[1])]

    def unacknowledged(self) -> list[tuple[TopicPartition, int]]:
        """Delivered records the application has not acknowledged (explicit mode's poll check)."""
        out = []
        for tp, records in self.delivered.items():
            acked = self.acked.get(tp, {})
            out.extend((tp, offset) for offset in records if offset not in acked)
        return out

    # ------------------------------------------------------------------ the consumer's side

    def accept_delivered(self) -> None:
        """Implicit mode: every delivered record without an acknowledgement is ACCEPTed."""
        for tp, records in self.delivered.items():
            acked = self.acked.setdefault(tp, {})
            for offset in records:
                acked.setdefault(offset, AcknowledgeType.ACCEPT)

    def settle_failed(self) -> None:
        """Failed records get their acknowledgement (the application's, else RELEASE)."""
        for tp, failed in self.failed.items():
            self.pending.setdefault(tp, {}).update(failed)
        self.failed.clear()

    def add_pending(self, tp: TopicPartition, acks: dict[int, int]) -> None:
        if acks:
            self.pending.setdefault(tp, {}).update(acks)

    def _move_acked(self) -> None:
        for tp, acked in self.acked.items():
            if acked:
                self.pending.setdefault(tp, {}).update(acked)
                delivered = self.delivered.get(tp, {})
                for offset, ack_type in acked.items():
                    if ack_type != AcknowledgeType.RENEW:
                        delivered.pop(offset, None)
                if not delivered:
                    self.delivered.pop(tp, None)
        self.acked.clear()

    def has_pending(self, renew_only: bool = False) -> bool:
        self._move_acked()
        if renew_only:
            return any(t == AcknowledgeType.RENEW for acks in self.pending.values() for t in acks.values())
        return any(self.pending.values())

    def take_pending(self, partitions: set[TopicPartition] | None = None) -> dict[TopicPartition, dict[int, int]]:
        """The pending acknowledgements of ``partitions`` (None: all), removed from the book."""
        self._move_acked()
        out: dict[TopicPartition, dict[int, int]] = {}
        for tp in list(self.pending):
            if partitions is None or tp in partitions:
                acks = self.pending.pop(tp)
                if acks:
                    out[tp] = acks
        return out

    def on_renewed(self, tp: TopicPartition, offsets: set[int]) -> None:
        """The broker confirmed these renewals: the records come back with the next poll (unless
        the application acknowledged them since)."""
        delivered = self.delivered.get(tp, {})
        acked = self.acked.get(tp, {})
        for offset in sorted(offsets):
            record = delivered.get(offset)
            if record is not None and offset not in acked:
                self.renewed.append(record)

    def on_renew_failed(self, tp: TopicPartition, offsets: set[int]) -> None:
        """The renewal failed (lock expired, renewal disabled): the records are no longer the
        application's to acknowledge."""
        delivered = self.delivered.get(tp, {})
        acked = self.acked.get(tp, {})
        for offset in offsets:
            if offset not in acked:
                delivered.pop(offset, None)
        if not delivered:
            self.delivered.pop(tp, None)

    def take_renewed(self) -> list[Record]:
        out, self.renewed = self.renewed, []
        return out

    def drop_partitions(self, partitions: set[TopicPartition]) -> None:
        """Forget delivered records of partitions whose acknowledgements can no longer be sent."""
        for tp in partitions:
            self.delivered.pop(tp, None)
            self.acked.pop(tp, None)
        self.renewed = [r for r in self.renewed if TopicPartition(r.topic, r.partition) not in partitions]
