"""The purgatory of parked ShareFetches: oldest first, only while records remain, one failing
fetch does not break the request that serves the others."""

from __future__ import annotations

import asyncio

import pytest

from quafka.broker.server.delayed_share_fetch import DelayedShareFetch, ShareFetchPurgatory

KEY, OTHER = ("g", "topic", 0), ("g", "topic", 1)


def run(coro):
    return asyncio.run(coro)


def test_parked_fetches_are_served_oldest_first_while_records_remain():
    async def scenario():
        purgatory = ShareFetchPurgatory()
        records = [3]  # what the partition can hand out, one per fetch
        served: list[str] = []

        def filler(name):
            def fill():
                if not records[0]:
                    return {}
                records[0] -= 1
                served.append(name)
                return {KEY: name}
            return fill

        ops = [DelayedShareFetch([KEY, OTHER], filler(f"f{i}")) for i in range(5)]
        for op in ops:
            purgatory.watch(op)
        assert purgatory.parked(KEY) == 5 and purgatory.operation_count() == 5
        assert purgatory.complete(KEY, lambda: records[0] > 0) == 3
        assert served == ["f0", "f1", "f2"]
        assert [op.future.result() for op in ops[:3]] == [{KEY: "f0"}, {KEY: "f1"}, {KEY: "f2"}]
        assert not ops[3].future.done() and not ops[4].future.done()
        # served fetches are gone from every key they watched; the others still wait on both
        assert purgatory.parked(KEY) == purgatory.parked(OTHER) == 2
        records[0] = 1
        assert purgatory.complete(OTHER, lambda: records[0] > 0) == 1
        assert served[-1] == "f3" and purgatory.operation_count() == 1

    run(scenario())


def test_a_fetch_that_fails_fails_alone():
    async def scenario():
        purgatory = ShareFetchPurgatory()

        def broken():
            raise RuntimeError("boom")

        bad = DelayedShareFetch([KEY], broken)
        good = DelayedShareFetch([KEY], lambda: {KEY: "ok"})
        purgatory.watch(bad)
        purgatory.watch(good)
        assert purgatory.complete(KEY, lambda: True) == 1
        with pytest.raises(RuntimeError, match="boom"):
            bad.future.result()
        assert good.future.result() == {KEY: "ok"}
        assert purgatory.operation_count() == 0

    run(scenario())


def test_a_reentrant_wake_of_the_key_being_served_returns_at_once():
    async def scenario():
        purgatory = ShareFetchPurgatory()
        inner: list[int] = []

        def fill():
            inner.append(purgatory.complete(KEY, lambda: True))  # e.g. a write's WakeFetches during the fill
            return {KEY: 1}

        op = DelayedShareFetch([KEY], fill)
        purgatory.watch(op)
        assert purgatory.complete(KEY, lambda: True) == 1
        assert inner == [0] and op.future.result() == {KEY: 1}

    run(scenario())


def test_timed_out_fetches_are_dropped_and_wake_all_completes_with_nothing():
    async def scenario():
        purgatory = ShareFetchPurgatory()
        gone = DelayedShareFetch([KEY], lambda: {KEY: "late"})
        waiting = DelayedShareFetch([KEY], lambda: {})
        purgatory.watch(gone)
        purgatory.watch(waiting)
        gone.future.cancel()
        assert purgatory.complete(KEY, lambda: True) == 0  # the cancelled one is dropped, the other finds nothing
        assert purgatory.parked(KEY) == 1
        purgatory.wake_all(KEY)
        assert waiting.future.result() == {} and purgatory.parked(KEY) == 0

    run(scenario())
