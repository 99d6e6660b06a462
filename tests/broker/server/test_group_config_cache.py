"""The resolved share-group config is cached per group (every ShareFetch asks for it) and follows
every change: the group's own configs, and the broker defaults it falls back on."""

from __future__ import annotations

from support import set_group_configs


def test_the_resolved_group_config_is_cached_and_follows_group_and_broker_changes(make_broker):
    broker = make_broker(config={"group.share.min.record.lock.duration.ms": 1000})
    state = broker.server.state

    def resolved(group: str) -> tuple[int, int]:
        return broker.call(lambda: (lambda c: (c.record_lock_duration_ms, c.assignment_interval_ms))(
            state.group_config(group)))

    first = broker.call(lambda: state.group_config("g1"))
    assert broker.call(lambda: state.group_config("g1")) is first  # resolved once
    assert resolved("g1") == resolved("g2") == (30_000, 1_000)

    set_group_configs(broker.bootstrap_servers, "g1", {"share.record.lock.duration.ms": "20000"})
    assert (resolved("g1"), resolved("g2")) == ((20_000, 1_000), (30_000, 1_000))

    # a dynamic change of a broker default (cluster-wide) reaches every group without its own value (the
    # whole cluster-level set is replaced: it keeps the min.insync.replicas that ELR needs, core/elr.py)
    broker.call(lambda: state.set_broker_configs("", {**state.dynamic_broker_configs(""),
                                                      "group.share.assignment.interval.ms": "500"}))
    assert (resolved("g1"), resolved("g2")) == ((20_000, 500), (30_000, 500))

    set_group_configs(broker.bootstrap_servers, "g1", {"share.record.lock.duration.ms": "40000"})
    assert resolved("g1") == (40_000, 500)
