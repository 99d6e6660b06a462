"""The shell's clocks (the core never reads one: it gets `now_ms` from here).

`wall_clock_ms` is what Kafka calls time.milliseconds(): timestamps that are stored or shown.
`monotonic_ms` never steps: acquisition-lock deadlines run on it, so a wall-clock step (NTP, a
suspended VM) neither expires every lock at once nor stretches them.
"""

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000
