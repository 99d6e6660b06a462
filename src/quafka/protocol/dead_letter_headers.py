"""The headers of a share group's dead-letter record (KIP-1191, Kafka 4.4), shared by the broker
that writes them and the tools that read them.

Kafka's six headers (ShareGroupDLQStateManager.ProduceRequestHandler), UTF-8 text with numbers in
decimal, in this order: `__dlq.errors.topic`, `__dlq.errors.partition`, `__dlq.errors.offset`,
`__dlq.errors.group`, `__dlq.errors.delivery.count`, `__dlq.errors.message` (the cause's message,
ShareGroupDLQManager's CLIENT_REJECT / DELIVERY_COUNT_EXCEEDED).

quafka adds two headers after them (docs/dead-letters.md lists them as a deviation; Kafka clients
ignore headers they do not know): `quafka.dlq.reason`, because Kafka's message does not tell a
RELEASE at the delivery limit from a lock that expired at it, nor from a share session that ended;
and `quafka.dlq.state.epoch`, the share partition's state epoch (it changes when the group's
offsets are altered), with which a broker restarting after a crash recognises the dead letters it
had already written.

A record re-produced by `quafka share-groups --redrive` carries `quafka.redrive.*` headers naming
the dead letter it came from.
"""

from __future__ import annotations

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
KAFKA_HEADERS = (HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET, HEADER_GROUP, HEADER_DELIVERY_COUNT, HEADER_MESSAGE)

# the cause messages of Kafka's ShareGroupDLQManager
MESSAGE_CLIENT_REJECT = "Offset rejected by client."
MESSAGE_DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."

# quafka's reason header and its values
HEADER_REASON = "quafka.dlq.reason"
REASON_REJECTED = "rejected"                      # a consumer acknowledged REJECT
REASON_RELEASED_AT_LIMIT = "released-at-limit"    # RELEASE (or a share session ending) at the delivery limit
REASON_LOCK_EXPIRED_AT_LIMIT = "lock-expired-at-limit"  # the acquisition lock expired at the delivery limit
REASON_RECOVERED = "recovered"                    # found ARCHIVING at start-up; the cause is inferred
REASON_FORCE_ARCHIVED = "force-archived"          # an operator archived it (quafka share-groups --archive)
REASON_KEY_FAILED = "key-failed"                  # an earlier record of its key was dead-lettered
#                                                   (quafka.share.key.ordering.on.failure=dead-letter)
REASONS = (REASON_REJECTED, REASON_RELEASED_AT_LIMIT, REASON_LOCK_EXPIRED_AT_LIMIT, REASON_RECOVERED,
           REASON_FORCE_ARCHIVED, REASON_KEY_FAILED)
HEADER_STATE_EPOCH = "quafka.dlq.state.epoch"

# what `--redrive` puts on a record it re-produces
HEADER_REDRIVE_TOPIC = "quafka.redrive.dlq.topic"
HEADER_REDRIVE_PARTITION = "quafka.redrive.dlq.partition"
HEADER_REDRIVE_OFFSET = "quafka.redrive.dlq.offset"


def dead_letter_headers(topic: str, partition: int, offset: int, group_id: str, delivery_count: int,
                        message: str | None, *, reason: str | None = None,
                        extra: tuple[tuple[str, str], ...] = ()) -> list[tuple[str, bytes]]:
    """A dead letter's headers, for the broker's writer and for a client writing its own (the
    worker framework): Kafka's (the message last, left out when None), then quafka's reason and
    ``extra`` (name, text) pairs, all UTF-8."""
    headers = [(HEADER_TOPIC, topic.encode()), (HEADER_PARTITION, str(partition).encode()),
               (HEADER_OFFSET, str(offset).encode()), (HEADER_GROUP, group_id.encode()),
               (HEADER_DELIVERY_COUNT, str(delivery_count).encode())]
    if message is not None:
        headers.append((HEADER_MESSAGE, message.encode()))
    if reason is not None:
        headers.append((HEADER_REASON, reason.encode()))
    headers.extend((name, text.encode()) for name, text in extra)
    return headers
