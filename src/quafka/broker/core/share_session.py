"""Share sessions: the per-member state of the ShareFetch/ShareAcknowledge conversation.

A share session is keyed by (group id, member id) and holds the partitions the member fetches
from and the epoch its next request must carry (kafka-reference §2.5):

- epoch 0 opens a session (a full request), replacing any existing one for the key;
- epoch -1 closes it (the shell then releases the member's acquired records);
- any other epoch must equal the session's, which then increments (INT32_MAX wraps to 1);
- a ShareFetch adds partitions, ForgottenTopicsData removes them, and later requests may list
  none (the session remembers them).

At most `max_sessions` sessions exist; a new one beyond that is refused (the shell waits MaxWaitMs
and answers SHARE_SESSION_LIMIT_REACHED). Live sessions are never evicted to make room (Kafka 4.4);
a closed connection removes its sessions. The cache indexes sessions by connection, as Kafka's
`ShareSessionCache` keeps `connectionIdToSessionMap` for its `ClientConnectionDisconnectListener`,
so a disconnect costs what that connection holds, not a scan of every session.

While a ShareFetch of the session is parked, `parked` holds it (the shell wakes it with nothing
when the session ends); `unsent` holds what a parked fetch acquired until its response is written
(the shell hands those records back, never delivered, if the connection drops in between).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from quafka.protocol.errors import ErrorCode
from quafka.protocol.share_session_epoch import FINAL_EPOCH, INITIAL_EPOCH, next_epoch


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    connection: Hashable
    epoch: int = INITIAL_EPOCH  # the epoch the next request must carry (advanced after each request)
    partitions: dict[tuple, None] = field(default_factory=dict)  # ordered set of (topic id, partition)
    rotation: int = 0  # first partition to fill on the next fetch (partitions rotate per request)
    parked: object | None = None  # the shell's parked ShareFetch of this session, if any
    unsent: dict | None = None  # {(topic id, partition): acquired ranges} completed but not yet answered

    @property
    def key(self) -> tuple[str, str]:
        return self.group_id, self.member_id

    def add(self, keys) -> None:
        for k in keys:
            self.partitions.setdefault(k, None)

    def forget(self, keys) -> None:
        for k in keys:
            self.partitions.pop(k, None)

    def rotated(self) -> list[tuple]:
        keys = list(self.partitions)
        if not keys:
            return keys
        start = self.rotation % len(keys)
        self.rotation = start + 1
        return keys[start:] + keys[:start]


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[Hashable, dict[tuple[str, str], None]] = {}
        self.evictions = 0  # sessions removed because their connection closed

    def __len__(self) -> int:
        return len(self.sessions)

    def has_room_for(self, group_id: str, member_id: str) -> bool:
        return (group_id, member_id) in self.sessions or len(self.sessions) < self.max_sessions

    def open(self, group_id: str, member_id: str, connection: Hashable) -> tuple[ShareSession | None, ShareSession | None]:
        """Open a session at epoch 0. Returns (new session or None if the cache is full, the
        session it replaced or None)."""
        key = (group_id, member_id)
        replaced = self._pop(key)
        if replaced is None and len(self.sessions) >= self.max_sessions:
            return None, None
        session = ShareSession(group_id, member_id, connection, epoch=INITIAL_EPOCH)  # the shell advances it
        self.sessions[key] = session
        self._by_connection.setdefault(connection, {})[key] = None
        return session, replaced

    def check(self, group_id: str, member_id: str, epoch: int) -> tuple[ShareSession | None, ErrorCode]:
        """The session for a request at `epoch` (> 0, or -1 to close), or the error to answer."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return None, ErrorCode.share_session_not_found
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            return None, ErrorCode.invalid_share_session_epoch
        return session, ErrorCode.none

    def advance(self, session: ShareSession) -> None:
        session.epoch = next_epoch(session.epoch)

    def is_live(self, session: ShareSession) -> bool:
        """`session` is still the member's session (not closed, dropped or replaced)."""
        return self.sessions.get(session.key) is session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._pop((group_id, member_id))

    def remove_connection(self, connection: Hashable) -> list[ShareSession]:
        """Remove the sessions opened on `connection` (it closed): O(its sessions)."""
        keys = self._by_connection.pop(connection, None)
        if not keys:
            return []
        gone = [self.sessions.pop(key) for key in keys]
        self.evictions += len(gone)
        return gone

    def remove_member(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._pop((group_id, member_id))

    def _pop(self, key: tuple[str, str]) -> ShareSession | None:
        session = self.sessions.pop(key, None)
        if session is not None:
            keys = self._by_connection.get(session.connection)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self._by_connection[session.connection]
        return session

    def partition_count(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())
