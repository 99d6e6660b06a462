"""The shell's clocks (the core never reads one: it gets `now_ms` from here).

`wall_clock_ms` is what Kafka calls time.milliseconds(): timestamps that are stored or shown.
`monotonic_ms` never steps: acquisition-lock deadlines run on it, so a wall-clock step (NTP, a
suspended VM) neither expires every lock at once nor stretches them.

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


def set_clock_source(wall_ns: Callable[[], int] | None = None, monotonic_ns: Callable[[], int] | None = None) -> None:
    """Read the wall and monotonic clocks from these functions (nanoseconds); None restores the
    system's. For tests and the simulator only."""
    global _wall_ns, _monotonic_ns
    _wall_ns = wall_ns if wall_ns is not None else time.time_ns
    _monotonic_ns = monotonic_ns if monotonic_ns is not None else time.monotonic_ns
