"""The shell's clocks (the core never reads one: it gets `now_ms` from here).

`wall_clock_ms` is what Kafka calls time.milliseconds(): timestamps that are stored or shown.
`monotonic_ms` never steps: acquisition-lock deadlines run on it, so a wall-clock step (NTP, a
suspended VM) neither expires every lock at once nor stretches them.

`wall_minus_monotonic_ms` converts between the two for due times that are kept on the monotonic
clock and stored or shown as epoch times: one offset, kept while the clocks agree with it (a
conversion read afresh each time moves by a millisecond as the two readings straddle a tick), and
taken again when the wall clock steps.

`set_clock_source` swaps the nanosecond sources both read (the simulator in tests/sim drives them
from its virtual time); the hot path is one global lookup, as cheap as `time.time_ns` itself.
"""

import time
from typing import Callable

_wall_ns: Callable[[], int] = time.time_ns
_monotonic_ns: Callable[[], int] = time.monotonic_ns


def wall_clock_ms() -> int:
    return _wall_ns() // 1_000_000


def monotonic_ms() -> int:
    return _monotonic_ns() // 1_000_000


_offset_ms: int | None = None
_OFFSET_SLACK_NS = 20_000_000  # a wall-clock step larger than this takes the offset again


def wall_minus_monotonic_ms() -> int:
    """Epoch ms minus monotonic ms, the same from call to call until the wall clock steps."""
    global _offset_ms
    offset_ns = _wall_ns() - _monotonic_ns()
    if _offset_ms is None or abs(offset_ns - _offset_ms * 1_000_000) > _OFFSET_SLACK_NS:
        _offset_ms = offset_ns // 1_000_000
    return _offset_ms


def set_clock_source(wall_ns: Callable[[], int] | None = None, monotonic_ns: Callable[[], int] | None = None) -> None:
    """Read the wall and monotonic clocks from these functions (nanoseconds); None restores the
    system's. For tests and the simulator only."""
    global _wall_ns, _monotonic_ns, _offset_ms
    _offset_ms = None
    _wall_ns = wall_ns if wall_ns is not None else time.time_ns
    _monotonic_ns = monotonic_ns if monotonic_ns is not None else time.monotonic_ns
