"""Share-group membership of one consumer (sans-I/O): what ShareGroupHeartbeat to send and when,
and what each answer does. The shell sends ``heartbeat_values()`` when ``heartbeat_due(now_ms)``
and reports the outcome with one ``on_*`` call; time comes in as ``now_ms``.

States and inputs (every pair is in ``TRANSITIONS``; a pair missing there cannot happen):

- UNSUBSCRIBED — no subscription; nothing is sent.
- JOINING — a heartbeat at epoch 0 with the subscription is due at once.
- STABLE — a member (epoch > 0); heartbeats every ``heartbeat_interval_ms``, sending the
  subscription again only when it changed.
- LEAVING — a heartbeat at epoch −1 is due (unsubscribe or close); afterwards UNSUBSCRIBED.
- FATAL — the group refused the member for good (authorization, group full, invalid request); the
  error is raised by the consumer's next call.

Fencing (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH) drops the assignment and rejoins at epoch 0 with
the same member id (Kafka 4.2+). Coordinator errors ask the shell to find the coordinator again;
other retriable errors retry after ``retry_backoff_ms``.
"""

from __future__ import annotations

from enum import Enum

from quafka.protocol.errors import ErrorCode

__all__ = ["ASSIGNMENT_UNCHANGED", "MemberState", "ShareMembership", "TRANSITIONS"]

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
ASSIGNMENT_UNCHANGED = None
COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                ErrorCode.coordinator_load_in_progress})
FENCED_ERRORS = frozenset({ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch})


class MemberState(Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"
    STABLE = "stable"
    LEAVING = "leaving"
    FATAL = "fatal"


S = MemberState
#: (state, input) → next state. Inputs: subscribe, unsubscribe, ok (a heartbeat answered without
#: error), left (the leave heartbeat answered or failed: it is sent once, whatever the answer),
#: fenced, coordinator, retriable, fatal. A pair that is missing leaves the state as it is: answers
#: that arrive after the member unsubscribed or failed are ignored, and "left" only arises while
#: LEAVING (where every answer is "left").
TRANSITIONS: dict[tuple[MemberState, str], MemberState] = {
    (S.UNSUBSCRIBED, "subscribe"): S.JOINING,
    (S.UNSUBSCRIBED, "unsubscribe"): S.UNSUBSCRIBED,
    (S.JOINING, "subscribe"): S.JOINING,
    (S.JOINING, "unsubscribe"): S.UNSUBSCRIBED,  # nothing joined yet: nothing to leave
    (S.JOINING, "ok"): S.STABLE,
    (S.JOINING, "fenced"): S.JOINING,
    (S.JOINING, "coordinator"): S.JOINING,
    (S.JOINING, "retriable"): S.JOINING,
    (S.JOINING, "fatal"): S.FATAL,
    (S.STABLE, "subscribe"): S.STABLE,
    (S.STABLE, "unsubscribe"): S.LEAVING,
    (S.STABLE, "ok"): S.STABLE,
    (S.STABLE, "fenced"): S.JOINING,
    (S.STABLE, "coordinator"): S.STABLE,
    (S.STABLE, "retriable"): S.STABLE,
    (S.STABLE, "fatal"): S.FATAL,
    (S.LEAVING, "subscribe"): S.JOINING,
    (S.LEAVING, "unsubscribe"): S.LEAVING,
    (S.LEAVING, "left"): S.UNSUBSCRIBED,
    (S.FATAL, "subscribe"): S.FATAL,
    (S.FATAL, "unsubscribe"): S.UNSUBSCRIBED,
}
INPUTS = ("subscribe", "unsubscribe", "ok", "left", "fenced", "coordinator", "retriable", "fatal")


class ShareMembership:
    """One member's view of its share group: state, epoch, subscription and assignment."""

    def __init__(self, group_id: str, member_id: str, rack_id: str | None, retry_backoff_ms: int,
                 retry_backoff_max_ms: int) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.rack_id = rack_id or None
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.state = MemberState.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self.subscription: frozenset[str] = frozenset()
        self.assignment: dict = {}  # topic id → frozenset of partitions
        self.heartbeat_interval_ms = 5000
        self.fatal_error: tuple[ErrorCode, str | None] | None = None
        self._send_subscription = False
        self._due_ms = 0
        self._failures = 0
        self.rebalance_count = 0

    def _step(self, event: str) -> None:
        next_state = TRANSITIONS.get((self.state, event))
        if next_state is None:
            return  # an answer that arrives after the state moved on (e.g. unsubscribed meanwhile)
        self.state = next_state

    # ------------------------------------------------------------------ application inputs

    def subscribe(self, topics: frozenset[str], now_ms: int) -> None:
        changed = topics != self.subscription
        self.subscription = topics
        was = self.state
        self._step("subscribe")
        if self.state is MemberState.JOINING and was is not MemberState.JOINING:
            self.member_epoch = JOIN_EPOCH
        if changed or self.state is MemberState.JOINING:
            self._send_subscription = True
            self._due_ms = now_ms

    def unsubscribe(self, now_ms: int) -> None:
        self.subscription = frozenset()
        self._step("unsubscribe")
        self.assignment = {}
        if self.state is MemberState.LEAVING:
            self._due_ms = now_ms
        else:
            self.member_epoch = JOIN_EPOCH

    # ------------------------------------------------------------------ the heartbeat

    def heartbeat_due(self, now_ms: int) -> bool:
        return self.state in (MemberState.JOINING, MemberState.STABLE, MemberState.LEAVING) and now_ms >= self._due_ms

    def next_due_ms(self) -> int | None:
        if self.state in (MemberState.JOINING, MemberState.STABLE, MemberState.LEAVING):
            return self._due_ms
        return None

    def heartbeat_values(self) -> dict:
        leaving = self.state is MemberState.LEAVING
        full = self.state is MemberState.JOINING or self._send_subscription
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": LEAVE_EPOCH if leaving else self.member_epoch,
            "rack_id": self.rack_id if full and not leaving else None,
            "subscribed_topic_names": tuple(sorted(self.subscription)) if full and not leaving else None,
        }

    def on_response(self, error: ErrorCode, error_message: str | None, member_epoch: int, interval_ms: int,
                    assignment: dict | None, now_ms: int) -> bool:
        """Apply a heartbeat answer; True when the assignment changed."""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            return False  # an answer to a heartbeat sent before the state moved on
        if self.state is MemberState.LEAVING:
            self._step("left")
            if self.state is MemberState.UNSUBSCRIBED:
                self.member_epoch = JOIN_EPOCH
            return False
        if error == ErrorCode.none:
            self._failures = 0
            self._send_subscription = False
            self._step("ok")
            self.member_epoch = member_epoch
            if interval_ms > 0:
                self.heartbeat_interval_ms = interval_ms
            self._due_ms = now_ms + self.heartbeat_interval_ms
            if assignment is not ASSIGNMENT_UNCHANGED and assignment != self.assignment:
                self.assignment = assignment
                self.rebalance_count += 1
                return True
            return False
        if error in FENCED_ERRORS:
            self._step("fenced")
            self.member_epoch = JOIN_EPOCH
            self._send_subscription = True
            self._due_ms = now_ms
            changed = bool(self.assignment)
            self.assignment = {}
            return changed
        if error in COORDINATOR_ERRORS:
            self._step("coordinator")
            self._retry(now_ms)
            return False
        if error.retriable:
            self._step("retriable")
            self._retry(now_ms)
            return False
        self._step("fatal")
        self.fatal_error = (error, error_message)
        changed = bool(self.assignment)
        self.assignment = {}
        return changed

    def on_failure(self, now_ms: int) -> None:
        """The heartbeat could not be sent or got no answer (connection, timeout)."""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            return
        if self.state is MemberState.LEAVING:
            self._step("left")
            self.member_epoch = JOIN_EPOCH
            return
        self._step("retriable")
        self._retry(now_ms)

    def _retry(self, now_ms: int) -> None:
        self._failures += 1
        backoff = min(self.retry_backoff_ms * (2 ** (self._failures - 1)), self.retry_backoff_max_ms)
        self._due_ms = now_ms + backoff
