"""Client metrics in the shape of Kafka's: totals, and averages / maxima / rates over a window.

Kafka's clients keep two samples of 30 s each; ``Sensor`` keeps the observations of the last
``window_ms`` (60 s) and answers avg, max and rate (per second) over them, while ``total`` counts
since start. Time comes in as milliseconds from the caller's monotonic clock.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["Sensor"]

WINDOW_MS = 60_000


class Sensor:
    """Observations of one quantity: ``record(value, now_ms)``; ``avg``, ``max``, ``rate``, ``total``."""

    def __init__(self, window_ms: int = WINDOW_MS) -> None:
        self.window_ms = window_ms
        self._samples: deque[tuple[int, float]] = deque()
        self.total = 0.0
        self.count = 0
        self._start_ms: int | None = None

    def record(self, value: float, now_ms: int) -> None:
        if self._start_ms is None:
            self._start_ms = now_ms
        self._samples.append((now_ms, value))
        self.total += value
        self.count += 1
        self._expire(now_ms)

    def _expire(self, now_ms: int) -> None:
        horizon = now_ms - self.window_ms
        while self._samples and self._samples[0][0] < horizon:
            self._samples.popleft()

    def avg(self, now_ms: int) -> float:
        self._expire(now_ms)
        if not self._samples:
            return math.nan
        return sum(v for _, v in self._samples) / len(self._samples)

    def max(self, now_ms: int) -> float:
        self._expire(now_ms)
        return max((v for _, v in self._samples), default=math.nan)

    def _elapsed_s(self, now_ms: int) -> float:
        start = self._start_ms if self._start_ms is not None else now_ms
        return max(min(now_ms - start, self.window_ms), 1000) / 1000

    def rate(self, now_ms: int) -> float:
        """Observations per second over the window."""
        self._expire(now_ms)
        return len(self._samples) / self._elapsed_s(now_ms)

    def value_rate(self, now_ms: int) -> float:
        """Sum of the values per second over the window."""
        self._expire(now_ms)
        return sum(v for _, v in self._samples) / self._elapsed_s(now_ms)
