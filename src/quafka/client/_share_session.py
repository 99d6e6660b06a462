"""One share session with one partition leader (sans-I/O): epochs and the partitions in it.

A share consumer keeps one session per leader node, keyed on the broker by (group, member):

- epoch 0 opens the session (a full ShareFetch naming every wanted partition; no
  acknowledgements allowed), then each request carries the next epoch (wrapping from INT32_MAX to
  1); epoch −1 closes it (ShareAcknowledge, which may still carry acknowledgements);
- later ShareFetch requests are incremental: they name only partitions new to the session or with
  acknowledgements, and list removed ones in ForgottenTopicsData;
- SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH and a dropped connection reset it to epoch 0.

Only one request of a session may be in flight; the shell guarantees it. Partitions are
(topic id, partition) pairs here, as on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from quafka.protocol.errors import ErrorCode

from quafka.protocol.share_session_epoch import FINAL_EPOCH, INITIAL_EPOCH, next_epoch

__all__ = ["ShareSession"]

# the broker holds no session at this client's epoch (dropped, or out of step): start again at epoch 0
SESSION_GONE_ERRORS = frozenset({ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch})
TopicIdPartition = tuple[UUID, int]
AckBatches = list[tuple[int, int, tuple[int, ...]]]


def _topics(partitions: Iterable[TopicIdPartition], acks: Mapping[TopicIdPartition, AckBatches],
            partition_key: str) -> list[dict[str, Any]]:
    by_topic: dict[UUID, list[int]] = {}
    for topic_id, partition in sorted(set(partitions) | set(acks), key=lambda tp: (str(tp[0]), tp[1])):
        by_topic.setdefault(topic_id, []).append(partition)
    return [{"topic_id": topic_id, "partitions": [
        {partition_key: p, "partition_max_bytes": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": l, "acknowledge_types": types}
            for f, l, types in acks.get((topic_id, p), ())]} for p in parts]}
        for topic_id, parts in by_topic.items()]


class ShareSession:
    """The client side of one share session with one node."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.epoch = INITIAL_EPOCH
        self.partitions: set[TopicIdPartition] = set()
        self._sent: set[TopicIdPartition] | None = None
        self._sent_epoch = INITIAL_EPOCH

    @property
    def is_open(self) -> bool:
        return self.epoch != INITIAL_EPOCH

    def fetch_values(self, group_id: str, member_id: str, wanted: set[TopicIdPartition],
                     acks: Mapping[TopicIdPartition, AckBatches], *, max_wait_ms: int, min_bytes: int, max_bytes: int,
                     max_records: int, batch_size: int, acquire_mode: int, is_renew: bool = False) -> dict[str, Any]:
        """A ShareFetch; acknowledgements are only allowed once the session is open."""
        if acks and not self.is_open:
            raise ValueError("acknowledgements cannot ride on the ShareFetch that opens a session")
        if self.is_open:
            new = wanted - self.partitions
            forgotten = self.partitions - wanted
        else:
            new, forgotten = set(wanted), set()
        self._sent, self._sent_epoch = set(wanted), self.epoch
        forgotten_topics: dict[UUID, list[int]] = {}
        for topic_id, partition in sorted(forgotten, key=lambda tp: (str(tp[0]), tp[1])):
            forgotten_topics.setdefault(topic_id, []).append(partition)
        return {
            "group_id": group_id,
            "member_id": member_id,
            "share_session_epoch": self.epoch,
            "max_wait": 0 if is_renew else max_wait_ms,  # ms (build_entity makes the timedelta)
            "min_bytes": 0 if is_renew else min_bytes,
            "max_bytes": 0 if is_renew else max_bytes,
            "max_records": 0 if is_renew else max_records,
            "batch_size": 0 if is_renew else batch_size,
            "share_acquire_mode": acquire_mode,
            "is_renew_ack": is_renew,
            "topics": _topics(new, acks, "partition_index"),
            "forgotten_topics_data": [{"topic_id": t, "partitions": ps} for t, ps in forgotten_topics.items()],
        }

    def acknowledge_values(self, group_id: str, member_id: str, acks: Mapping[TopicIdPartition, AckBatches], *,
                           is_renew: bool = False, closing: bool = False) -> dict[str, Any]:
        """A ShareAcknowledge at the session's epoch (or −1 to close it)."""
        if not self.is_open:
            raise ValueError("a ShareAcknowledge needs an open share session")
        epoch = FINAL_EPOCH if closing else self.epoch
        self._sent, self._sent_epoch = None, epoch
        return {
            "group_id": group_id,
            "member_id": member_id,
            "share_session_epoch": epoch,
            "is_renew_ack": is_renew,
            "topics": [{"topic_id": t["topic_id"], "partitions": [
                {"partition_index": p["partition_index"], "acknowledgement_batches": p["acknowledgement_batches"]}
                for p in t["partitions"]]} for t in _topics((), acks, "partition_index")],
        }

    def on_response(self, error: ErrorCode) -> None:
        """The answer to the request built last: move the epoch on, or reset the session."""
        if error in SESSION_GONE_ERRORS:
            self.reset()
            return
        if error != ErrorCode.none:
            return  # the session did not change (e.g. the request was refused as a whole)
        if self._sent_epoch == FINAL_EPOCH:
            self.reset()
            return
        if self._sent is not None:
            self.partitions = self._sent
        self.epoch = next_epoch(self.epoch)

    def reset(self) -> None:
        """Start over at epoch 0 (the broker dropped the session, or the connection dropped)."""
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
        self._sent = None
