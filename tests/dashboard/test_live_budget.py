"""The live views' bounded work (benchmarks/dashboard.py measures what they cost the broker): a
sampler whose samples cost much CPU stretches its wait to stay within its share of the time, and live
overview samples reuse a recent DescribeLogDirs answer while a page load always asks."""

from __future__ import annotations

import asyncio
import time

from quafka import EmbeddedBroker
from quafka.dashboard.live import MAX_WAIT_S, SAMPLE_BUDGET, LiveHub, next_wait_s
from quafka.dashboard.settings import DashboardSettings
from quafka.dashboard.source import Source


def test_next_wait_keeps_the_cadence_for_quick_samples_and_stretches_for_slow_ones():
    assert next_wait_s(1.0, 0.002) == 1.0
    assert next_wait_s(5.0, 0.25) == 0.25 * (1 / SAMPLE_BUDGET - 1)  # 24.75 s: sampling 1 % of the time
    wait = next_wait_s(1.0, 0.5, budget=0.1)
    assert wait == 4.5 and 0.5 / (0.5 + wait) == 0.1
    assert next_wait_s(1.0, 10.0) == MAX_WAIT_S  # a live view still updates


def test_a_slow_sampler_waits_longer_than_its_cadence():
    async def main():
        hub = LiveHub(asyncio.Event())
        sampled = asyncio.Event()

        async def produce():
            started = time.thread_time()
            while time.thread_time() - started < 0.05:  # a sample costing at least 50 ms of CPU
                pass
            sampled.set()
            return [("x", "<p>1</p>")]

        queue = hub.subscribe("slow", 0.01, produce)
        await asyncio.wait_for(queue.get(), 10)  # the first sample (not counted: templates compile)
        await asyncio.wait_for(queue.get(), 10)
        sampler = hub._samplers["slow"]
        waited = sampler.wait_s
        samples = sampler.samples
        await hub.close()
        return waited, samples

    waited, samples = asyncio.run(main())
    assert samples == 2
    assert waited >= 0.05 * (1 / SAMPLE_BUDGET - 1)  # not the 10 ms cadence


def test_live_overview_samples_reuse_a_recent_disk_answer():
    with EmbeddedBroker() as broker:
        async def main():
            source = Source(DashboardSettings({"bootstrap.servers": broker.bootstrap_servers}))
            calls = []
            real = source.admin.describe_log_dirs

            async def counted(*args, **kwargs):
                calls.append(1)
                return await real(*args, **kwargs)

            source.admin.describe_log_dirs = counted
            try:
                first = await source.overview(live=True)
                second = await source.overview(live=True)
                assert len(calls) == 1 and second.log_dirs is first.log_dirs
                await source.overview()  # a page load asks again
                assert len(calls) == 2
                assert not isinstance(first.log_dirs, type(None)) and first.log_dirs
            finally:
                await source.close()

        asyncio.run(main())
