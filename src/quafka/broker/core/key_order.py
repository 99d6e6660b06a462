"""Key-ordered sharing (`quafka.share.key.ordering`, a quafka extension): the keys of a share
partition's in-flight window, so that at most one record per key is in flight, in offset order.

Every record with a key that enters the window joins its key's queue; it may be acquired only while
it is the first unsettled record of its key (the *head*). A record settles when it becomes
ACKNOWLEDGED or ARCHIVED (durably: the share partition settles it when its write commits); then the
next record of the key becomes the head. A released record stays unsettled, so it keeps its place
and the records behind it keep waiting. Records without a key are not ordered.

When a record of a key fails (REJECT, the delivery limit, the dead-letter queue), the key is marked
*failed* unless the group's `quafka.share.key.ordering.on.failure` is `continue`. A failed key's head
then waits for an operator (`park`) or follows the failed record to the dead-letter queue
(`dead-letter`), until `release_key`. Failed keys are persisted with the share partition's state
(a quafka tagged field of its ShareSnapshot/ShareUpdate records), so a restart keeps them.

Bounds: the queues hold only records of the window (at most `share.partition.max.record.locks`);
failed keys are capped at `MAX_FAILED_KEYS` per share partition: past the cap a failure is treated
as `continue` and `fail` says so (the shell logs it and counts it).

Pure: the share partition calls it; no I/O, clock or hashing of its own (dict hashing of bytes keys
is salted per process, but nothing depends on iteration order: queues and failed keys are ordered
by offset where order matters).
"""

from __future__ import annotations

from collections import deque

MAX_FAILED_KEYS = 10_000


class KeyOrder:
    def __init__(self) -> None:
        self._queues: dict[bytes, deque[int]] = {}  # key -> its unsettled offsets in the window, in order
        self._key_of: dict[int, bytes] = {}  # offset -> key, for every queued offset
        self.failed: dict[bytes, int] = {}  # failed key -> offset of the record that failed it

    # ------------------------------------------------------------------ queries
    def __bool__(self) -> bool:
        return bool(self._key_of) or bool(self.failed)

    def key_of(self, offset: int) -> bytes | None:
        return self._key_of.get(offset)

    def head(self, key: bytes) -> int | None:
        queue = self._queues.get(key)
        return queue[0] if queue else None

    def waits(self, offset: int, failed_blocks: bool) -> bool:
        """Whether the record at `offset` may not be acquired now: it is not the head of its key,
        or (`failed_blocks`) its key failed."""
        key = self._key_of.get(offset)
        if key is None:
            return False
        return self._queues[key][0] != offset or (failed_blocks and key in self.failed)

    def keys_in_flight(self) -> int:
        """Keys with at least one unsettled record in the window."""
        return len(self._queues)

    def blocked_keys(self, failed_blocks: bool) -> int:
        """Keys with a record waiting behind another of the key (or behind the key's failure)."""
        return sum(1 for key, queue in self._queues.items()
                   if len(queue) > 1 or (failed_blocks and key in self.failed))

    def failed_items(self) -> tuple[tuple[bytes, int], ...]:
        """The failed keys and the offsets that failed them, in offset order (what is persisted)."""
        return tuple(sorted(self.failed.items(), key=lambda item: (item[1], item[0])))

    def queued(self, key: bytes) -> tuple[int, ...]:
        return tuple(self._queues.get(key, ()))

    # ------------------------------------------------------------------ changes
    def add(self, offset: int, key: bytes) -> bool:
        """A record enters the window (in offset order); True when it is not its key's head."""
        if offset in self._key_of:
            return self._queues[key][0] != offset
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(offset)
        self._key_of[offset] = key
        return len(queue) > 1

    def settle(self, offset: int) -> int | None:
        """The record at `offset` settled: it leaves its key's queue. Returns the key's new head
        when the settled record was the head and another record of the key waits, else None."""
        key = self._key_of.pop(offset, None)
        if key is None:
            return None
        queue = self._queues[key]
        was_head = queue[0] == offset
        if was_head:
            queue.popleft()
        else:
            queue.remove(offset)  # settled out of turn (start offset moved, force archive): rare
        if not queue:
            del self._queues[key]
            return None
        return queue[0] if was_head else None

    def fail(self, key: bytes, offset: int) -> bool:
        """Mark `key` failed by the record at `offset`; False when the cap is reached (the failure
        then counts as `continue`). A key already failed keeps its first failing offset."""
        if key in self.failed:
            return True
        if len(self.failed) >= MAX_FAILED_KEYS:
            return False
        self.failed[key] = offset
        return True

    def unfail(self, key: bytes, offset: int) -> None:
        """Undo `fail` by the record at `offset` (its write was rolled back)."""
        if self.failed.get(key) == offset:
            del self.failed[key]

    def release_key(self, key: bytes) -> int | None:
        """An operator released a failed key: it is no longer failed; its head (if any)."""
        self.failed.pop(key, None)
        return self.head(key)

    def restore_failed(self, items) -> None:
        for key, offset in items:
            if len(self.failed) < MAX_FAILED_KEYS:
                self.failed[bytes(key)] = offset

    def clear_queues(self) -> None:
        self._queues.clear()
        self._key_of.clear()

    def clear(self) -> None:
        self.clear_queues()
        self.failed.clear()
