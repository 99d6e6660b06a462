"""The share consumer's request decisions, pure: which leaders a poll fetches from, which pending
acknowledgements go out now and which ride on the next ShareFetch, what a partition's or a
request's error means, and when a failed acknowledgement is retried. The request manager
(`_share_request_manager`) and the asyncio driver (`_share_driver.ShareConsumerDriver`) ask these;
tests check each (state, input) pair (tests/client/test_share_requests.py).

Kafka's Java client makes the same decisions in `ShareConsumeRequestManager` (fetch and
acknowledgement requests per node, the piggy-backing of acknowledgements on ShareFetch, retries of
ShareAcknowledge with backoff until the commit deadline) and `ShareFetchCollector`; the names here
follow it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

from quafka.protocol.errors import ErrorCode

__all__ = [
    "DELETED_ERRORS", "LEADER_ERRORS", "METADATA_ERRORS", "PartitionErrorAction", "SESSION_REFUSAL_ERRORS",
    "acks_to_send_now", "commit_retries", "fetch_error_is_fatal", "fetch_targets", "leader_of", "partition_error_action",
    "retry_backoff_ms",
]

TP = TypeVar("TP")

LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})
METADATA_ERRORS = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id,
                             ErrorCode.leader_not_available})
# acknowledgements of a deleted topic or partition: final, never retried (Kafka's
# ShareConsumeRequestManager.handlePartitionError does not retry them although they are retriable)
DELETED_ERRORS = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id})
# a ShareFetch refused for its share session (gone, out of step, or no room for a new one): the session
# starts again, the consumer goes on
SESSION_REFUSAL_ERRORS = frozenset({ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                                    ErrorCode.share_session_limit_reached})


def leader_of(leader_id: int | None, leader_epoch: int, hint: tuple[int, int] | None) -> int | None:
    """The node to send a partition's requests to: a leader hint from a response (CurrentLeader)
    newer than the metadata's leader epoch wins; None when neither names a leader (refresh the
    metadata)."""
    if hint is not None and (leader_id is None or hint[1] > leader_epoch):
        return hint[0]
    if leader_id is None or leader_id < 0:
        return None
    return leader_id


def fetch_targets(leaders: Collection[int], *, fetching: Collection[int], record_limit: bool,
                  rotation: int) -> tuple[list[int], int]:
    """(nodes to start a ShareFetch on now, the next rotation). batch_optimized fetches from every
    leader that has none out; record_limit fetches from one broker at a time, rotating, and only
    when no fetch is out (KAFKA-19767: max.poll.records is a strict limit across brokers)."""
    if record_limit:
        if fetching or not leaders:
            return [], rotation
        order = sorted(leaders)
        return [order[rotation % len(order)]], rotation + 1
    return [node for node in sorted(leaders) if node not in fetching], rotation


def acks_to_send_now(pending: Iterable[TP], *, leader: Callable[[TP], int | None],
                     session_open: Callable[[int], bool], fetching: Collection[int], buffered: bool,
                     record_limit: bool, fetch_target: int | None = None) -> set[TP]:
    """At poll: the partitions whose pending acknowledgements go out at once (ShareAcknowledge).
    The others ride on the ShareFetch about to go to their leader, which happens when nothing is
    buffered (so the poll fetches), the leader has an open share session and no fetch out, and
    the poll fetches from it: every idle leader in batch_optimized mode, only ``fetch_target``
    (the one broker of this round) in record_limit mode. Kafka's ShareConsumeRequestManager
    piggy-backs acknowledgements on ShareFetch in both modes. `leader(tp)` is None for a partition
    not assigned any more or with no known leader: sent now (and failed there if need be)."""
    pending = set(pending)
    if buffered:
        return pending
    carried = set()
    for tp in pending:
        node = leader(tp)
        if node is None or not session_open(node) or node in fetching:
            continue
        if record_limit and node != fetch_target:
            continue
        carried.add(tp)
    return pending - carried


class PartitionErrorAction(enum.Enum):
    USE_LEADER_HINT = "send to the leader the response names"
    REFRESH_METADATA = "refresh the metadata and fetch again"
    FAIL = "report the error to the application at the next poll"


def partition_error_action(error: ErrorCode, current_leader_id: int | None) -> PartitionErrorAction:
    """What a partition error of a ShareFetch response means (ShareConsumeRequestManager's
    handling of NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH with CurrentLeader, metadata errors,
    and the rest)."""
    if error in LEADER_ERRORS:
        if current_leader_id is not None and current_leader_id >= 0:
            return PartitionErrorAction.USE_LEADER_HINT
        return PartitionErrorAction.REFRESH_METADATA
    if error in METADATA_ERRORS or error.retriable:
        return PartitionErrorAction.REFRESH_METADATA
    return PartitionErrorAction.FAIL


def fetch_error_is_fatal(error: ErrorCode) -> bool:
    """A ShareFetch's top-level error that ends the consumer (raised by the next poll): not
    retriable and not about the share session (which simply starts again)."""
    return error != ErrorCode.none and not error.retriable and error not in SESSION_REFUSAL_ERRORS


def retry_backoff_ms(attempt: int, base_ms: int, max_ms: int) -> int:
    """The wait before retry `attempt` (1, 2, ...): retry.backoff.ms doubling up to retry.backoff.max.ms."""
    return min(base_ms * 2 ** max(attempt - 1, 0), max_ms)


def commit_retries(outcomes: Mapping[TP, Any], *, now_ms: float, backoff_ms: float, deadline_ms: float,
                   closing: bool) -> tuple[set[TP], dict[TP, Any]]:
    """(partitions whose acknowledgements are sent again, final outcomes of the others) after one
    round of ShareAcknowledge: a retriable error is retried while the retry can start before the
    commit's deadline and the consumer is not closing, except UNKNOWN_TOPIC_OR_PARTITION and
    UNKNOWN_TOPIC_ID (the topic was deleted: retrying would only end in LEADER_NOT_AVAILABLE at the
    deadline); anything else is final (None: success)."""
    retry: set[TP] = set()
    final: dict[TP, Any] = {}
    for tp, exc in outcomes.items():
        if exc is not None and getattr(exc, "retriable", False) and getattr(exc, "code", None) not in DELETED_ERRORS \
                and now_ms + backoff_ms < deadline_ms and not closing:
            retry.add(tp)
        else:
            final[tp] = exc
    return retry, final
