"""LiveHub: live updates that cost the broker the same whether one or five browsers watch a page.

One sampler task per watched page key (a page and its parameters), started by the first event
stream that watches it and stopped when the last one leaves (reference counted by the open
streams). Each sample fetches the page's data once, renders its fragments once, and puts the
same framed bytes on every subscriber's queue; only fragments whose HTML changed are sent, with a
``sample`` event carrying the sample's sequence number (the page shows it as ``data-sample-seq``).
A subscriber whose queue is full (a client that stopped reading) is dropped. The hub is the one
owner of timers in the dashboard; every wait also ends on the dashboard's shutdown event.

Bounded work: a sampler spends at most SAMPLE_BUDGET of one core's time sampling (the CPU time of
the event loop's thread while a sample runs: served by the broker, the samples are broker CPU).
When a sample costs more than SAMPLE_BUDGET x its cadence (the overview of a broker with many
topics), the wait after it stretches to keep that share (next_wait_s; at most MAX_WAIT_S; the first
sample, which compiles the templates, does not count), and the stretch is logged.
benchmarks/dashboard.py measures what live views cost the broker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .sse import frame

__all__ = ["LiveHub"]

log = logging.getLogger("quafka.dashboard")

Produce = Callable[[], Awaitable[list[tuple[str, str]]]]  # -> [(fragment id, HTML)]
QUEUE_SIZE = 32
SAMPLE_BUDGET = 0.01  # the most of one core's time one sampler spends sampling
MAX_WAIT_S = 60.0  # however costly its samples, a live view updates at least this often


def next_wait_s(cadence_s: float, sample_s: float, budget: float = SAMPLE_BUDGET) -> float:
    """The wait after a sample that cost ``sample_s`` of CPU: the cadence, or longer so that
    sampling takes at most ``budget`` of the time (sample / (sample + wait) <= budget)."""
    return max(cadence_s, min(MAX_WAIT_S, sample_s * (1 / budget - 1)))


@dataclass(eq=False)
class _Sampler:
    key: str
    cadence_s: float
    produce: Produce
    queues: set[asyncio.Queue] = field(default_factory=set)
    last: dict[str, str] = field(default_factory=dict)
    seq: int = 0
    task: asyncio.Task | None = None
    samples: int = 0  # samples taken (tests and benchmarks read it)
    wait_s: float = 0.0  # the wait after the last sample (the cadence, or stretched by the budget)


class LiveHub:
    def __init__(self, shutdown: asyncio.Event) -> None:
        self.shutdown = shutdown
        self._samplers: dict[str, _Sampler] = {}

    @property
    def sampler_count(self) -> int:
        return len(self._samplers)

    def subscribers(self, key: str) -> int:
        sampler = self._samplers.get(key)
        return 0 if sampler is None else len(sampler.queues)

    def subscribe(self, key: str, cadence_s: float, produce: Produce) -> asyncio.Queue:
        """A queue of framed SSE bytes for page ``key``; starts its sampler when it is the first.
        A newcomer first gets the fragments the sampler last sent (already rendered)."""
        sampler = self._samplers.get(key)
        if sampler is None:
            sampler = self._samplers[key] = _Sampler(key, cadence_s, produce)
            sampler.task = asyncio.create_task(self._run(sampler), name=f"dashboard sampler {key}")
        queue: asyncio.Queue = asyncio.Queue(QUEUE_SIZE)
        if sampler.last:
            queue.put_nowait(b"".join(frame(i, html) for i, html in sampler.last.items())
                             + frame("sample", str(sampler.seq)))
        sampler.queues.add(queue)
        return queue

    def unsubscribe(self, key: str, queue: asyncio.Queue) -> None:
        sampler = self._samplers.get(key)
        if sampler is None:
            return
        sampler.queues.discard(queue)
        if not sampler.queues:
            del self._samplers[key]
            if sampler.task is not None:
                sampler.task.cancel()

    async def close(self) -> None:
        tasks = [s.task for s in self._samplers.values() if s.task is not None]
        for s in self._samplers.values():
            for q in s.queues:
                _end(q)
        self._samplers.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, sampler: _Sampler) -> None:
        while not self.shutdown.is_set():
            started = time.thread_time()
            try:
                fragments = await sampler.produce()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a failed sample is logged; the next one may succeed
                log.exception("dashboard: sampling %s failed", sampler.key)
                fragments = []
            sampler.samples += 1
            changed = [(i, html) for i, html in fragments if sampler.last.get(i) != html]
            sampler.last.update(changed)
            sampler.seq += 1
            payload = b"".join(frame(i, html) for i, html in changed) + frame("sample", str(sampler.seq))
            for queue in list(sampler.queues):
                if queue.full():  # a client that stopped reading: end its stream
                    sampler.queues.discard(queue)
                    _end(queue)
                    log.info("dashboard: dropped a slow live view of %s", sampler.key)
                else:
                    queue.put_nowait(payload)
            took_s = time.thread_time() - started  # this thread's CPU: the loop's, broker work included
            # the first sample also compiles templates and connects: it does not count
            wait_s = sampler.cadence_s if sampler.samples == 1 else next_wait_s(sampler.cadence_s, took_s)
            if (wait_s > sampler.cadence_s) != (sampler.wait_s > sampler.cadence_s):
                log.info("dashboard: a sample of %s cost %.0f ms of CPU; live updates every %.1f s (cadence %.1f s, "
                         "sampling kept under %.0f%% of a core)", sampler.key, took_s * 1000,
                         max(wait_s, sampler.cadence_s), sampler.cadence_s, SAMPLE_BUDGET * 100)
            sampler.wait_s = wait_s
            try:
                await asyncio.wait_for(self.shutdown.wait(), wait_s)
            except asyncio.TimeoutError:
                pass


def _end(queue: asyncio.Queue) -> None:
    while not queue.empty():
        queue.get_nowait()
    queue.put_nowait(None)
