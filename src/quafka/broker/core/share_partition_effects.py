"""The effects and results of the share partition machine (`share_partition`): what a call asks the
shell to do (`PersistWrite`, `LockTimer`, `WakeFetches`, `DeadLetterWrite`) and what it answers
(`Acquisition`, `Acknowledgement`), plus a run's snapshot before a pending change and its persisted
form. `share_partition` re-exports them; they live here so that the parts of the machine
(`_partition_controls`, `in_flight`) share them without importing each other in a circle.
"""

from __future__ import annotations

from typing import NamedTuple, Union

from quafka.protocol.share_state_records import StateBatch
from quafka.protocol.errors import ErrorCode

from ._runs import WAIT_BACKOFF, Run
from .record_state import RecordState, persisted_state

AVAILABLE = RecordState.AVAILABLE


class AcquiredRange(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class PersistWrite(NamedTuple):
    """Effect: make this state durable, then call `on_write_complete(write_id, ok)`. A batch's
    `due_ms` is in the share partition's clock (the shell stores it as epoch time);
    `failed_keys` (key ordering) replaces the stored set when not None."""

    write_id: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
    failed_keys: tuple | None = None


class LockTimer(NamedTuple):
    """Effect: the earliest acquisition-lock deadline or due time of a waiting record is now
    `deadline_ms` (None: neither is left). When it passes, the shell calls `on_lock_timer`."""

    deadline_ms: int | None


class WakeFetches(NamedTuple):
    """Effect: records may have become acquirable (released, expired, or room in the window):
    complete the partition's parked ShareFetches."""


class DeadLetterWrite(NamedTuple):
    """Effect: write offsets [first_offset, last_offset] (now ARCHIVING, and durably so) to the
    group's dead-letter queue, then call `on_dead_letters_done` — whether the write succeeded or
    not. `reason` is one of `dead_letter_headers.REASONS`."""

    first_offset: int
    last_offset: int
    delivery_count: int
    reason: str


Effect = Union[PersistWrite, LockTimer, WakeFetches, DeadLetterWrite]

# the event that takes a record to ARCHIVING instead of ARCHIVED, and quafka's reason for it
class Acquisition(NamedTuple):
    ranges: list[AcquiredRange]
    throttled: bool  # stopped early near the delivery limit: take nothing more from this partition now
    effects: list[Effect]


class Acknowledgement(NamedTuple):
    error: ErrorCode  # NONE when applied; nothing changed otherwise
    write: PersistWrite | None  # the write to await before answering (its effect, not in `effects`)
    effects: list[Effect]


# (state, delivery count, member id, deadline, due, wait) of a run before a pending change; ACQUIRED
# with member id None: its holder's share session ended while the change was being written
Snapshot = tuple

def _snapshot(run: Run) -> Snapshot:
    return run.state, run.delivery_count, run.member_id, run.deadline_ms, run.due_ms, run.wait


def _state_batch(run: Run) -> StateBatch:
    """The persisted form of a run: ACQUIRED reads AVAILABLE; a backoff due time is kept."""
    due = run.due_ms if run.wait == WAIT_BACKOFF and run.state == AVAILABLE else 0
    return StateBatch(run.first, run.last, int(persisted_state(run.state)), run.delivery_count, due)
