"""The shell's clock (the core never reads one: it gets `now_ms` from here)."""

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
