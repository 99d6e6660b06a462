"""Share groups' dead-letter queues in the simulation (KIP-1191): which groups have one, and what
the oracle checks of the DLQ topics.

About half the share groups of a seed get a DLQ topic `dlq.<group>` (1–2 partitions, opted in with
`errors.deadletterqueue.group.enable`) and the group configs `errors.deadletterqueue.topic.name`
and `errors.deadletterqueue.copy.record.enable=true`. Record values are unique in a simulation, so
a dead letter's copied value names its source record. At every full check the DLQ topics are read
from the start; invariants:

- ``dead-letter-duplicated``: two dead letters of one source record for one group and state
  epoch (quafka looks for dead letters written before a crash before it writes recovered
  ARCHIVING records again; an offsets reset starts a new state epoch, whose dead letters are
  new) — each given-up record is in the DLQ at most once;
- ``dead-lettered-and-accepted``: a record whose ACCEPT was answered NONE has a dead letter (its
  share partition never reset);
- ``dead-letter-missing`` (final check, the DLQ writes finished): a record whose REJECT — or whose
  RELEASE at the delivery limit — was answered NONE, with no reset since, has no dead letter:
  each given-up record is in the DLQ at least once.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quafka.protocol.dead_letter_headers import (
    HEADER_GROUP,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_REASON,
    HEADER_STATE_EPOCH,
    HEADER_TOPIC,
)
from quafka.protocol.record_batch import CONTROL_FLAG, LOG_OVERHEAD, iter_headers, iter_records

from .oracle import Violation

if TYPE_CHECKING:
    from .runner import Simulation


@dataclass(frozen=True)
class DeadLetter:
    dlq_offset: int
    group: str
    topic: str
    partition: int
    offset: int
    state_epoch: int
    reason: str
    value: bytes | None


def decode_dead_letters(data: bytes | None) -> list[tuple[int, dict[str, bytes | None], bytes | None]]:
    """(offset, headers, value) of every data record in `data`."""
    out = []
    if not data:
        return out
    view = memoryview(data)
    for pos, header in iter_headers(data):
        if header.attributes & CONTROL_FLAG:
            continue
        for rec in iter_records(view[pos:pos + header.batch_length + LOG_OVERHEAD]):
            value = None if rec.value is None else bytes(rec.value)
            out.append((rec.offset, {k: (None if v is None else bytes(v)) for k, v in rec.headers}, value))
    return out


def _text(headers: dict, key: str) -> str:
    v = headers.get(key)
    return v.decode() if v else ""


def _int(headers: dict, key: str) -> int:
    try:
        return int(_text(headers, key))
    except ValueError:
        return -1


class DeadLetterQueues:
    """The seed's DLQ topics, and the checks over what they hold."""

    def __init__(self, sim: "Simulation", rng: random.Random, groups: list[str]) -> None:
        self.sim = sim
        self.oracle = sim.oracle
        self.topic_of: dict[str, str] = {}  # group -> its DLQ topic
        self.partitions: dict[str, int] = {}  # DLQ topic -> partitions
        self.topic_ids: dict[str, uuid.UUID] = {}
        for g in groups:
            if rng.random() < 0.5:
                name = f"dlq.{g}"
                self.topic_of[g] = name
                self.partitions[name] = rng.choice((1, 2))
        self.seen = 0  # dead letters read at the last check

    def group_configs(self, group: str) -> list[tuple[str, str]]:
        name = self.topic_of.get(group)
        if name is None:
            return []
        return [("errors.deadletterqueue.topic.name", name), ("errors.deadletterqueue.copy.record.enable", "true")]

    def describe(self) -> str:
        return ", ".join(f"{g} -> {t} x{self.partitions[t]}" for g, t in sorted(self.topic_of.items())) or "none"

    # ------------------------------------------------------------------ checks
    async def check(self, fetch_all, final: bool) -> bool:
        """Read every DLQ topic (`fetch_all(topic_id, partition, decode)`) and check; False when the
        broker went down meanwhile (checked again after its restart)."""
        letters: list[DeadLetter] = []
        for name in sorted(self.topic_ids):
            for p in range(self.partitions[name]):
                records = await fetch_all(self.topic_ids[name], p, decode_dead_letters)
                if records is None:
                    return False
                for offset, (headers, value) in sorted(records.items()):
                    letters.append(DeadLetter(offset, _text(headers, HEADER_GROUP), _text(headers, HEADER_TOPIC),
                                              _int(headers, HEADER_PARTITION), _int(headers, HEADER_OFFSET),
                                              _int(headers, HEADER_STATE_EPOCH), _text(headers, HEADER_REASON), value))
        self.seen = len(letters)
        self._check(letters, final)
        return True

    def _source(self) -> dict[bytes, tuple[uuid.UUID, int, int]]:
        index = {}
        for topic in self.oracle.topics.values():
            for p, acked in enumerate(topic.acked):
                for offset, (value, _pid, _seq) in acked.items():
                    index[value] = (topic.topic_id, p, offset)
        return index

    def _check(self, letters: list[DeadLetter], final: bool) -> None:
        seen: dict[tuple, DeadLetter] = {}
        for d in letters:
            key = (d.group, d.value if d.value is not None else (d.topic, d.partition, d.offset), d.state_epoch)
            first = seen.get(key)
            if first is not None:
                raise Violation("dead-letter-duplicated",
                                f"group {d.group} {d.topic}-{d.partition} offset {d.offset} (state epoch "
                                f"{d.state_epoch}): dead letters at DLQ offsets {first.dlq_offset} ({first.reason}) "
                                f"and {d.dlq_offset} ({d.reason})")
            seen[key] = d
        index = self._source()
        by_record: dict[tuple[str, uuid.UUID, int, int], DeadLetter] = {}
        for d in letters:
            src = index.get(d.value) if d.value is not None else None
            if src is None:
                continue  # a record never acknowledged, or of a deleted topic
            by_record[(d.group, *src)] = d
            group = self.oracle.groups.get(d.group)
            part = group.parts.get((src[0], src[1])) if group is not None else None
            if part is None or part.resets:
                continue
            how = part.finished.get(src[2], "")
            if how.startswith("accepted"):
                raise Violation("dead-lettered-and-accepted",
                                f"group {d.group} {d.topic}-{d.partition} offset {d.offset}: it was {how}, and it "
                                f"has a dead letter at DLQ offset {d.dlq_offset} (reason {d.reason})")
        if not final:
            return
        for group_name in sorted(self.topic_of):
            group = self.oracle.groups[group_name]
            for (tid, p), part in sorted(group.parts.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
                if tid not in self.oracle.topics or part.resets:
                    continue
                for offset, how in sorted(part.finished.items()):
                    if how.startswith(("rejected", "archived")) and (group_name, tid, p, offset) not in by_record:
                        raise Violation("dead-letter-missing",
                                        f"group {group_name} {self.oracle.topic_name(tid)}-{p} offset {offset}: it "
                                        f"was {how}; the group's DLQ {self.topic_of[group_name]} holds no dead "
                                        f"letter of it after the drain")

    def writes_pending(self) -> bool:
        """The broker's DLQ writer still has writes in flight."""
        inc = self.sim.world.inc
        server = inc.server if inc is not None else None
        manager = getattr(server, "share_partitions", None)
        writer = getattr(manager, "dead_letters", None)
        return bool(getattr(writer, "_tasks", None))
