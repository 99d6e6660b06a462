"""Page snapshots shared by page GETs and live samplers (quafka.dashboard.pages.Snapshots): one
load per key per cadence however many viewers, one load at a time per key, dropped after an action."""

from __future__ import annotations

import asyncio

from dashboard.conftest import Dash

from quafka.dashboard import pages
from quafka.dashboard.pages import Snapshots


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_gets_are_one_load_and_a_fresh_snapshot_is_reused_until_it_is_older_than_max_age():
    clock = Clock()
    snaps = Snapshots(clock)
    started = []

    async def loader():
        started.append(clock.now)
        await asyncio.sleep(0)
        return {"n": len(started)}

    async def main():
        first = await asyncio.gather(*(snaps.get("overview?", 5.0, loader) for _ in range(5)))
        assert [c["n"] for c in first] == [1] * 5 and snaps.loads == 1
        clock.now = 5.0
        assert (await snaps.get("overview?", 5.0, loader))["n"] == 1  # 5 s old: still fresh
        clock.now = 5.1
        assert (await snaps.get("overview?", 5.0, loader))["n"] == 2  # older: loaded again
        assert (await snaps.get("share-group?group=g", 1.0, loader))["n"] == 3  # another key: its own load

    asyncio.run(main())


def test_invalidate_drops_every_snapshot_and_a_load_running_across_it_is_not_kept():
    snaps = Snapshots(Clock())
    gate = asyncio.Event
    calls = []

    async def main():
        release = gate()

        async def slow():
            calls.append("slow")
            await release.wait()
            return {"v": "before the action"}

        async def quick():
            calls.append("quick")
            return {"v": "after the action"}

        running = asyncio.ensure_future(snaps.get("k", 60.0, slow))
        await asyncio.sleep(0)
        snaps.invalidate()  # an action ran while the slow load was under way
        release.set()
        assert (await running)["v"] == "before the action"  # its caller gets it ...
        assert (await snaps.get("k", 60.0, quick))["v"] == "after the action"  # ... but it is not reused

    asyncio.run(main())
    assert calls == ["slow", "quick"]


def test_at_most_max_snapshots_keys_are_kept(monkeypatch):
    monkeypatch.setattr(pages, "MAX_SNAPSHOTS", 3)
    snaps = Snapshots(Clock())

    async def main():
        for i in range(5):
            await snaps.get(f"k{i}", 60.0, lambda i=i: asyncio.sleep(0, {"i": i}))
        return sorted(snaps._entries), sorted(snaps._locks)

    entries, locks = asyncio.run(main())
    assert entries == ["k2", "k3", "k4"] and locks == ["k2", "k3", "k4"]


def test_five_tabs_loading_the_overview_at_once_cost_the_broker_one_load(scenario):
    async def go(client, app):
        answers = await asyncio.gather(*(client.get("/") for _ in range(5)))
        return [a.status_code for a in answers], app.state.dashboard.snapshots.loads

    statuses, loads = Dash(scenario.bootstrap).run(go)
    assert statuses == [200] * 5 and loads == 1
