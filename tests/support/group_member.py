"""A confluent-kafka consumer-group member for the interop tests of classic and KIP-848 groups.

Each member polls on its own thread, as applications do: a synchronous commit waits behind the
member's own JoinGroup (or heartbeat) on the coordinator connection — Kafka answers one request per
connection at a time — and cooperative-sticky and KIP-848 members keep consuming, so committing,
while they rebalance; one thread driving every member would block in A's commit while B, unpolled,
could not rejoin. Confluent's assignment() is only called on the polling thread (from another
thread it can block for good while this one polls).

After every record the member commits what it consumed (explicit offsets, synchronously), as an
application that wants each record once does across rebalances. A commit refused because a
rebalance moved the generation or member epoch on (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
STALE_MEMBER_EPOCH) is kept and sent again after the next poll and recorded in `refusals`; the
offsets of partitions being revoked are committed in the revocation callback, which never raises
(an exception inside librdkafka's callback can leave close() hanging): a refusal there also counts
in `refused_on_revoke`. A refused commit can let a record be consumed twice, so tests assert
exactly-once only when none was refused.
"""

from __future__ import annotations

import threading

from confluent_kafka import Consumer, KafkaException, TopicPartition

from . import wait_until

__all__ = ["GroupMember", "drain"]


class GroupMember:
    RETRY_LATER = ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS", "STALE_MEMBER_EPOCH")

    def __init__(self, consumer: Consumer, seen: list[int], topic: str) -> None:
        self.consumer = consumer
        self.seen = seen
        self.topic = topic
        self.pending: dict[int, int] = {}
        self.refusals: list[str] = []
        self.refused_on_revoke = 0
        self.error: BaseException | None = None
        self._assignment: list = []
        self._stop = threading.Event()
        consumer.subscribe([topic], on_assign=lambda c, ps: None, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def refused(self) -> int:
        return len(self.refusals)

    def _commit(self, partitions=None) -> bool:
        offsets = [TopicPartition(self.topic, p, o) for p, o in sorted(self.pending.items())
                   if partitions is None or p in partitions]
        if not offsets:
            return True
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].name() not in self.RETRY_LATER:
                raise
            self.refusals.append(exc.args[0].name())
            return False
        for tp in offsets:
            self.pending.pop(tp.partition, None)
        return True

    def _on_revoke(self, _consumer, partitions) -> None:
        try:
            if not self._commit({tp.partition for tp in partitions}):
                self.refused_on_revoke += 1
        except KafkaException as exc:
            self.refused_on_revoke += 1
            self.refusals.append(f"on revoke: {exc.args[0].name()}")

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msg = self.consumer.poll(0.05)
                if msg is not None and msg.error() is None:
                    self.seen.append(int(msg.value()))
                    self.pending[msg.partition()] = msg.offset() + 1
                self._commit()
                self._assignment = self.consumer.assignment()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread by check()
            self.error = exc
        finally:
            self.consumer.close()  # leaves the group, committing in the revocation callback

    def assignment(self) -> list:
        """As of the member's last poll."""
        self.check()
        return self._assignment

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"a member's poll loop failed: {self.error!r}") from self.error

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the member did not close within 30 s"
        self.check()


def drain(members: list[GroupMember], seen: list[int], until: int, timeout_s: float = 60) -> None:
    """Wait until `until` records were seen in total (a member's failure surfaces at once)."""

    def enough() -> bool:
        for m in members:
            m.check()
        return len(seen) >= until

    wait_until(enough, timeout_s, message=f"{until} records seen (got {len(seen)})")
