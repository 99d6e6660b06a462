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
# written by a client that gives up on a record itself (quafka.framework's workers)
REASON_MAX_ATTEMPTS = "max-attempts"              # the job failed on its route's last attempt
REASON_DESERIALIZE_FAILED = "deserialize-failed"  # the key or value could not be deserialized
REASONS = (REASON_REJECTED, REASON_RELEASED_AT_LIMIT, REASON_LOCK_EXPIRED_AT_LIMIT, REASON_RECOVERED,
           REASON_FORCE_ARCHIVED, REASON_KEY_FAILED, REASON_MAX_ATTEMPTS, REASON_DESERIALIZE_FAILED)
HEADER_STATE_EPOCH = "quafka.dlq.state.epoch"

# why a client (quafka.framework) gave up on the record: on the dead letters it writes itself, never
# on the broker's (the broker never sees the exception). UTF-8 text; the message and traceback are
# cut to a bounded size (framework/errors.py).
HEADER_ERROR_CLASS = "quafka.error.class"          # the exception's class, module-qualified unless builtin
HEADER_ERROR_MESSAGE = "quafka.error.message"      # str(exception), truncated
HEADER_ERROR_TRACEBACK = "quafka.error.traceback"  # the formatted traceback, its last lines kept
HEADER_ERROR_ATTEMPTS = "quafka.error.attempts"    # the delivery attempt that failed last
HEADER_ERROR_ROUTE = "quafka.error.route"          # the framework route (group/topic)
HEADER_ERROR_HOST = "quafka.error.host"            # the worker's host name
HEADER_ERROR_PID = "quafka.error.pid"              # the worker's process id
HEADER_ERROR_ID = "quafka.error.id"                # an id of the failure, also in the worker's log line
ERROR_HEADERS = (HEADER_ERROR_CLASS, HEADER_ERROR_MESSAGE, HEADER_ERROR_TRACEBACK, HEADER_ERROR_ATTEMPTS,
                 HEADER_ERROR_ROUTE, HEADER_ERROR_HOST, HEADER_ERROR_PID, HEADER_ERROR_ID)

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
