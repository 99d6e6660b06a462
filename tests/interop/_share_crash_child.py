"""Child process for test_share_state_crash.py: a confluent-kafka ShareConsumer in explicit mode
that acknowledges every record it is given by `ack_type(value, delivery_count)` and reports, one
JSON object per line on stdout (each flushed before the next step, so whatever was printed before
a SIGKILL reaches the test):

    {"d": [[partition, offset, value, delivery_count], ...]}   the records of one poll, printed
                                                               before they are acknowledged
    {"r": [[partition, offset, delivery_count, ack_type], ...], "ok": bool, "err": str|null}
                                                               the broker's answer to acks (the
                                                               acknowledgement commit callback)
    {"e": "..."}                                               a poll/commit error
    {"closed": true}                                           after a clean close (stdin "close")

Acknowledgements go out with every `commit_every`-th poll's commit_sync(), the others piggyback on
the next poll's ShareFetch; either way their result comes through the commit callback.

    python _share_crash_child.py BOOTSTRAP GROUP TOPIC MAX_POLL_RECORDS COMMIT_EVERY
"""

from __future__ import annotations

import collections
import json
import sys
import threading

ACCEPT, RELEASE, REJECT = 1, 2, 3


def ack_type(value: int, delivery_count: int) -> int:
    """What the consumer does with a record: released on every delivery (archived at the delivery
    limit), rejected, released once then accepted, or accepted."""
    if value % 23 == 0:
        return RELEASE
    if value % 17 == 0:
        return REJECT
    if value % 11 == 0 and delivery_count == 1:
        return RELEASE
    return ACCEPT


def main() -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    max_poll_records, commit_every = int(sys.argv[4]), int(sys.argv[5])
    types = {ACCEPT: AcknowledgeType.ACCEPT, RELEASE: AcknowledgeType.RELEASE, REJECT: AcknowledgeType.REJECT}
    out_lock = threading.Lock()

    def emit(obj) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    # (partition, offset) -> [(delivery count, ack type)] sent and not yet answered, oldest first: a
    # RELEASE piggybacked on a ShareFetch may come back redelivered in that ShareFetch's response, and
    # be acknowledged again, before the callback for the RELEASE runs
    pending: dict[tuple[int, int], collections.deque] = collections.defaultdict(collections.deque)

    def on_commit(offsets, exc) -> None:
        results = []
        ok = exc is None
        for tp, offs in offsets.items():
            if tp.error is not None:
                ok = False
            for o in sorted(offs):
                waiting = pending.get((tp.partition, o))
                dc, t = waiting.popleft() if waiting else (None, None)
                if waiting is not None and not waiting:
                    del pending[(tp.partition, o)]
                results.append([tp.partition, o, dc, t])
        emit({"r": results, "ok": ok, "err": None if exc is None else str(exc)})

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", "max.poll.records": max_poll_records,
                              "log_level": 2, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200})
    consumer.set_acknowledgement_commit_callback(on_commit)
    consumer.subscribe([topic])

    stop = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    polls = 0
    while not stop.is_set():
        try:
            msgs = list(consumer.poll(0.1))
        except Exception as exc:  # noqa: BLE001 - reported to the test
            emit({"e": f"poll: {exc!r}"})
            continue
        good = []
        for m in msgs:
            if m.error() is not None:
                emit({"e": f"message: {m.error()}"})
            else:
                good.append(m)
        if not good:
            continue
        emit({"d": [[m.partition(), m.offset(), int(m.value()), m.delivery_count()] for m in good]})
        for m in good:
            t = ack_type(int(m.value()), m.delivery_count())
            pending[(m.partition(), m.offset())].append((m.delivery_count(), t))
            consumer.acknowledge(m, types[t])
        polls += 1
        if polls % commit_every == 0:
            try:
                consumer.commit_sync(5.0)
            except Exception as exc:  # noqa: BLE001
                emit({"e": f"commit_sync: {exc!r}"})
    try:
        consumer.commit_sync(10.0)
    except Exception as exc:  # noqa: BLE001
        emit({"e": f"final commit_sync: {exc!r}"})
    consumer.close()
    emit({"closed": True})


if __name__ == "__main__":
    main()
