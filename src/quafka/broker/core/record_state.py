"""Record states of a share partition and every transition between them, as data.

A record of a share partition is in exactly one state (KIP-932; kafka-reference §4.1):

    AVAILABLE     may be acquired by a consumer
    ACQUIRED      held by one member under an acquisition lock
    ACKNOWLEDGED  processed (terminal)
    ARCHIVING     on its way to the group's dead-letter queue (Kafka 4.4, KIP-1191): not
                  terminal (it holds the start offset back), neither acquirable nor acknowledgeable
    ARCHIVED      rejected, over the delivery limit, or passed by the start offset (terminal)

`TRANSITIONS` maps (state, event) to the next state. A pair that is absent is illegal and raises
`IllegalTransition`, which the share partition reports as INVALID_RECORD_STATE. The delivery limit
is expressed as separate events (RELEASE_AT_LIMIT, LOCK_EXPIRED_AT_LIMIT) so that the table alone
decides every outcome; with a dead-letter queue enabled for the group the share partition takes the
`*_TO_DLQ` events instead, which lead to ARCHIVING (Kafka's `InFlightState.tryUpdateState` with
`dlqSupportEnabled` and `SharePartition.recordStateWithDlq`), and DEAD_LETTER_DONE then archives
the record whether or not its DLQ write succeeded (`SharePartition.initiateDLQAndArchive`).
"""

from __future__ import annotations

import enum


class RecordState(enum.IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class Event(enum.Enum):
    ACQUIRE = "acquire"
    ACCEPT = "accept"
    RELEASE = "release"
    RELEASE_AT_LIMIT = "release at the delivery limit"
    REJECT = "reject"
    REJECT_TO_DLQ = "reject, with a dead-letter queue"
    RELEASE_AT_LIMIT_TO_DLQ = "release at the delivery limit, with a dead-letter queue"
    LOCK_EXPIRED_AT_LIMIT_TO_DLQ = "lock expired at the delivery limit, with a dead-letter queue"
    GAP = "gap"
    RENEW = "renew"
    LOCK_EXPIRED = "lock expired"
    LOCK_EXPIRED_AT_LIMIT = "lock expired at the delivery limit"
    START_OFFSET_MOVED = "start offset moved past"
    DEAD_LETTER_DONE = "dead letter written"
    # quafka's extensions (docs/share-groups.md, "Extensions"): operators' force actions, and a
    # key's later record following a dead-lettered one (quafka.share.key.ordering.on.failure)
    FORCE_RELEASE = "force release"
    FORCE_ARCHIVE = "force archive"
    FORCE_ARCHIVE_TO_DLQ = "force archive, with a dead-letter queue"
    KEY_FAILED = "an earlier record of its key failed"
    KEY_FAILED_TO_DLQ = "an earlier record of its key failed, with a dead-letter queue"


AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED = (
    RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVING, RecordState.ARCHIVED)

TRANSITIONS: dict[tuple[RecordState, Event], RecordState] = {
    (AVAILABLE, Event.ACQUIRE): ACQUIRED,
    (AVAILABLE, Event.START_OFFSET_MOVED): ARCHIVED,
    (ACQUIRED, Event.ACCEPT): ACKNOWLEDGED,
    (ACQUIRED, Event.RELEASE): AVAILABLE,
    (ACQUIRED, Event.RELEASE_AT_LIMIT): ARCHIVED,
    (ACQUIRED, Event.REJECT): ARCHIVED,
    (ACQUIRED, Event.REJECT_TO_DLQ): ARCHIVING,
    (ACQUIRED, Event.RELEASE_AT_LIMIT_TO_DLQ): ARCHIVING,
    (ACQUIRED, Event.LOCK_EXPIRED_AT_LIMIT_TO_DLQ): ARCHIVING,
    (ACQUIRED, Event.GAP): ARCHIVED,
    (ACQUIRED, Event.RENEW): ACQUIRED,
    (ACQUIRED, Event.LOCK_EXPIRED): AVAILABLE,
    (ACQUIRED, Event.LOCK_EXPIRED_AT_LIMIT): ARCHIVED,
    (ACQUIRED, Event.START_OFFSET_MOVED): ARCHIVED,
    (ARCHIVING, Event.DEAD_LETTER_DONE): ARCHIVED,
    (AVAILABLE, Event.FORCE_RELEASE): AVAILABLE,
    (ACQUIRED, Event.FORCE_RELEASE): AVAILABLE,
    (AVAILABLE, Event.FORCE_ARCHIVE): ARCHIVED,
    (ACQUIRED, Event.FORCE_ARCHIVE): ARCHIVED,
    (AVAILABLE, Event.FORCE_ARCHIVE_TO_DLQ): ARCHIVING,
    (ACQUIRED, Event.FORCE_ARCHIVE_TO_DLQ): ARCHIVING,
    (AVAILABLE, Event.KEY_FAILED): ARCHIVED,
    (AVAILABLE, Event.KEY_FAILED_TO_DLQ): ARCHIVING,
    (ARCHIVING, Event.START_OFFSET_MOVED): ARCHIVED,
    (ACKNOWLEDGED, Event.START_OFFSET_MOVED): ACKNOWLEDGED,
    (ARCHIVED, Event.START_OFFSET_MOVED): ARCHIVED,
}

# Acknowledge types on the wire (ShareFetch/ShareAcknowledge AcknowledgeTypes).
ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RENEW = 0, 1, 2, 3, 4
ACK_EVENTS = {ACK_GAP: Event.GAP, ACK_ACCEPT: Event.ACCEPT, ACK_RELEASE: Event.RELEASE,
              ACK_REJECT: Event.REJECT, ACK_RENEW: Event.RENEW}


class IllegalTransition(Exception):
    def __init__(self, state: RecordState, event: Event) -> None:
        super().__init__(f"a record in state {state.name} cannot take event '{event.value}'")
        self.state = state
        self.event = event


def next_state(state: RecordState, event: Event) -> RecordState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


def persisted_state(state: RecordState) -> RecordState:
    """What the share-state topic stores: ACQUIRED is never persisted (it reads as AVAILABLE)."""
    return RecordState.AVAILABLE if state == RecordState.ACQUIRED else state
