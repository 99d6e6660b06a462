"""Routes are declared, then validated as a whole before anything connects (acceptance 3 of the
framework issue): each bad setting fails with one clear message naming the route and the key.
The app's bootstrap address points at a closed port, so a test that connected would fail."""

from __future__ import annotations

import pytest

from quafka.framework import (
    App,
    Backoff,
    BackoffExceedsLockDuration,
    Consumer,
    ConsumerGroupConsumer,
    RouteConfigError,
    ShareGroupConsumer,
    Worker,
)
from quafka.framework.settings import ROUTE_SETTINGS

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}  # nothing listens: validation must not connect


class Jobs(Consumer):
    def consume_one(self, message):
        pass


class Batch(Consumer):
    def consume(self, messages):
        pass


def share_app(**settings) -> App:
    app = App(NOWHERE)
    app.share_group("workers").topic("jobs", Jobs, **settings)
    return app


def problem_of(app: App, error=RouteConfigError) -> str:
    with pytest.raises(error) as info:
        Worker(app, handle_signals=False)  # the worker validates in its constructor, before connecting
    [problem] = info.value.problems
    return str(problem)


def test_a_valid_app_has_full_settings_and_names():
    app = App(NOWHERE)
    app.share_group("workers").topic("jobs", Jobs, concurrency=4, max_poll_records=1).topic("mail", Batch)
    app.consumer_group("audit").topic("orders", Batch, auto_offset_reset="earliest")
    routes = app.validate()
    assert [r.name for r in routes] == ["workers/jobs", "workers/mail", "audit/orders"]
    jobs = routes[0]
    assert jobs.settings["concurrency"] == 4 and jobs.settings["lock_duration_ms"] == 30_000
    assert jobs.entry_point == "consume_one" and routes[1].entry_point == "consume"
    assert "lock_duration_ms" not in routes[2].settings and routes[2].settings["auto_offset_reset"] == "earliest"


def test_unknown_key_names_the_route_and_suggests():
    assert problem_of(share_app(max_pol_records=1)) == (
        "route 'workers/jobs': max_pol_records: is not a route setting; did you mean 'max_poll_records'?")


def test_a_paused_backoff_longer_than_the_lock_minus_the_margin():
    message = problem_of(share_app(lock_duration_ms=10_000, backoff=Backoff(1000, 2.0, 9_500), backoff_mode="pause"),
                         BackoffExceedsLockDuration)
    assert message == ("route 'workers/jobs': backoff: max_ms 9500 exceeds the longest backoff a lock allows, "
                       "9000 ms (lock_duration_ms 10000 - backoff_margin_ms 1000); backoff_mode='auto' lets the "
                       "broker wait it out")


def test_backoff_within_the_lock_is_fine():
    assert share_app(lock_duration_ms=10_000, backoff=Backoff(1000, 2.0, 9_000), backoff_mode="pause").validate()


def test_a_backoff_longer_than_the_lock_is_fine_when_the_broker_may_wait_it_out():
    for mode in ("auto", "broker"):
        [route] = share_app(lock_duration_ms=15_000, backoff=Backoff(30_000, 2.0, 240_000), backoff_mode=mode).validate()
        assert route.settings["backoff_mode"] == mode and route.settings["delayed_delivery"] is True


def two_routes_of_one_group(first: dict, second: dict, group2: str = "workers") -> App:
    app = App(NOWHERE)
    app.share_group("workers").topic("jobs", Jobs, **first)
    app.share_group(group2).topic("mail", Jobs, **second)
    return app


@pytest.mark.parametrize(("first", "second", "key", "text"), [
    ({"backoff": Backoff(1000, 2.0, 10_000)}, {"backoff": Backoff(500, 2.0, 10_000)}, "backoff",
     "backoff=Backoff(initial_ms=500, multiplier=2.0, max_ms=10000) differs from route 'workers/jobs''s "
     "backoff=Backoff(initial_ms=1000, multiplier=2.0, max_ms=10000); routes of share group 'workers' share its "
     "redelivery backoff (quafka.share.redelivery.backoff.ms), so they must declare the same backoff, "
     "on_error='retry' or not, and backoff_mode"),
    ({}, {"backoff": None}, "backoff", "no backoff (backoff=None, on_error='retry') differs from route "
                                      "'workers/jobs''s backoff=Backoff(initial_ms=1000"),
    ({}, {"on_error": "release"}, "backoff", "no backoff (backoff=Backoff(initial_ms=1000, multiplier=2.0, "
                                             "max_ms=10000), on_error='release') differs"),
    ({}, {"backoff_mode": "pause"}, "backoff_mode", "backoff_mode='pause' differs from route 'workers/jobs''s "
                                                    "backoff=Backoff("),
    ({}, {"delayed_delivery": False}, "delayed_delivery", "False differs from route 'workers/jobs''s True; "
                                                          "quafka.share.delivery.delay.enable is one setting of "
                                                          "share group 'workers'"),
])
def test_routes_of_one_share_group_that_ask_different_things_of_it_are_refused(first, second, key, text):
    message = problem_of(two_routes_of_one_group(first, second))
    assert message.startswith(f"route 'workers/mail': {key}: ") and text in message, message


@pytest.mark.parametrize(("first", "second"), [
    ({"backoff": Backoff(1000, 2.0, 10_000)}, {"backoff": Backoff(1000, 2.0, 10_000), "max_attempts": 3}),
    ({"backoff": None}, {"on_error": "release"}),  # both: again at once
    ({"backoff_mode": "auto"}, {"backoff_mode": "broker"}),  # both: the broker waits
    ({"backoff_mode": "pause", "backoff": Backoff(100, 1.0, 100)}, {"backoff_mode": "pause"}),  # the workers wait
])
def test_routes_of_one_share_group_that_agree_are_fine(first, second):
    assert len(two_routes_of_one_group(first, second).validate()) == 2


def test_routes_of_different_groups_may_differ():
    assert len(two_routes_of_one_group({"backoff": Backoff(1, 1.0, 1)}, {"backoff": None, "delayed_delivery": False},
                                       group2="mailers").validate()) == 2


def test_consumer_group_only_option_on_a_share_route():
    assert problem_of(share_app(auto_offset_reset="earliest")) == (
        "route 'workers/jobs': auto_offset_reset: applies to consumer-group routes only: a share group has no "
        "offsets or partitions of its own (set share.auto.offset.reset on the group instead)")


def test_share_only_option_on_a_consumer_group_route():
    app = App(NOWHERE)
    app.consumer_group("audit").topic("orders", Jobs, lock_duration_ms=5000)
    assert "lock_duration_ms: applies to share-group routes only" in problem_of(app)


@pytest.mark.parametrize(("settings", "key", "text"), [
    ({"concurrency": 0}, "concurrency", "must be an integer >= 1, got 0"),
    ({"concurrency": True}, "concurrency", "must be an integer >= 1, got True"),
    ({"executor": "fork"}, "executor", "must be one of thread, process, async; got 'fork'"),
    ({"max_poll_records": 0}, "max_poll_records", "must be an integer >= 1"),
    ({"ack_mode": "later"}, "ack_mode", "must be one of auto, manual"),
    ({"on_error": "ignore"}, "on_error", "must be one of retry, reject, release"),
    ({"backoff": 500}, "backoff", "must be a Backoff(...) or None"),
    ({"backoff": Backoff(1000, 101.0, 10_000)}, "backoff", "multiplier 101.0 exceeds 100.0, the broker's largest"),
    ({"backoff": Backoff(1000, 2.0, 8 * 86_400_000)}, "backoff", "exceeds 7 days (604800000 ms), the most the broker"),
    ({"backoff_mode": "later"}, "backoff_mode", "must be one of auto, broker, pause; got 'later'"),
    ({"delayed_delivery": "yes"}, "delayed_delivery", "must be true or false; got 'yes'"),
    ({"max_attempts": 0}, "max_attempts", "must be an integer >= 1"),
    ({"max_attempts": 6}, "max_attempts", "6 exceeds delivery_count_limit 5"),
    ({"dead_letter_topic": "__dlq"}, "dead_letter_topic", "not starting with __"),
    ({"dead_letter_mode": "broker"}, "dead_letter_mode", "needs dead_letter_topic"),
    ({"deserializer": "yaml"}, "deserializer", "must be a callable or one of bytes, utf-8, json"),
    ({"lock_duration_ms": 500}, "lock_duration_ms", "must be an integer >= 1000"),
    ({"backoff_margin_ms": 30_000}, "backoff_margin_ms", "30000 ms leaves nothing of the 30000 ms lock"),
    ({"kafka": {"group.id": "x"}}, "kafka['group.id']", "is set by the framework"),
    ({"kafka": {"fetch.max.wait.ms": -1}}, "kafka['fetch.max.wait.ms']", "fetch.max.wait.ms"),
    ({"kafka": {"enable.auto.commit": "true"}}, "kafka['enable.auto.commit']", "not supported by a share consumer"),
])
def test_each_bad_share_setting(settings, key, text):
    message = problem_of(share_app(**settings))
    assert message.startswith(f"route 'workers/jobs': {key}: ") and text in message, message


def test_every_problem_is_reported_at_once():
    with pytest.raises(RouteConfigError) as info:
        share_app(concurrency=0, executor="fork", colour="red").validate()
    assert [p.key for p in info.value.problems] == ["concurrency", "executor", "colour"]
    assert str(info.value).startswith("3 route problems:\n  route 'workers/jobs': concurrency")


def test_consumer_class_problems():
    class Nothing(Consumer):
        pass

    app = App(NOWHERE)
    app.share_group("a").topic("t1", Nothing)
    app.share_group("b").topic("t2", ConsumerGroupConsumer)
    app.consumer_group("c").topic("t3", ShareGroupConsumer)
    app.share_group("d").topic("t4", object)
    with pytest.raises(RouteConfigError) as info:
        app.validate()
    messages = [str(p) for p in info.value.problems]
    assert "route 'a/t1': consumer: Nothing defines neither consume(messages) nor consume_one(message)" in messages
    assert any(m.startswith("route 'b/t2': consumer: ConsumerGroupConsumer is a ConsumerGroupConsumer") for m in messages)
    assert any(m.startswith("route 'c/t3': consumer: ShareGroupConsumer is a ShareGroupConsumer") for m in messages)
    assert any(m.startswith("route 'd/t4': consumer: must be a subclass of quafka.framework.Consumer") for m in messages)


def test_one_group_name_for_both_group_types_is_refused():
    app = App(NOWHERE)
    app.share_group("jobs").topic("a", Jobs)
    app.consumer_group("jobs").topic("b", Jobs)
    assert "'jobs' is declared as both a share group and a consumer group" in problem_of(app)


def test_app_settings_problems():
    with pytest.raises(RouteConfigError) as info:
        App({"group.id": "x"}).validate()
    keys = [p.key for p in info.value.problems]
    assert keys == ["bootstrap.servers", "group.id", "routes"]


def test_the_app_takes_the_security_settings_and_checks_them():
    from quafka.framework.settings import admin_config

    secure = dict(NOWHERE, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.username": "alice", "sasl.password": "s3cret"})
    app = App(secure)
    app.share_group("workers").topic("jobs", Jobs)
    assert [r.name for r in app.validate()] == ["workers/jobs"]
    assert admin_config(secure)["sasl.username"] == "alice"  # the framework's Admin clients get them
    app = App(dict(NOWHERE, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}))
    app.share_group("workers").topic("jobs", Jobs)
    with pytest.raises(RouteConfigError) as info:
        app.validate()
    [problem] = info.value.problems
    assert problem.key == "sasl.mechanism" and "Kerberos" in str(problem)


def test_include_routes_selects_and_refuses_unknown_patterns():
    app = App(NOWHERE)
    app.share_group("workers").topic("jobs", Jobs).topic("mail", Jobs)
    app.consumer_group("audit").topic("orders", Jobs)
    assert [r.name for r in app.routes(["workers/*"])] == ["workers/jobs", "workers/mail"]
    assert [r.name for r in app.routes(["audit"])] == ["audit/orders"]
    with pytest.raises(RouteConfigError, match=r"\['nothing/\*'\] match no route"):
        app.routes(["nothing/*"])


def test_every_setting_is_documented_with_its_group_types():
    for setting in ROUTE_SETTINGS.values():
        assert setting.doc and setting.groups, setting.name
        if len(setting.groups) == 1:
            assert setting.why_not, setting.name


def test_the_settings_table_of_the_docs_is_the_declared_one():
    from pathlib import Path

    from quafka.framework.settings import settings_table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "framework.md").read_text()
    assert settings_table() in doc, "run: python -m quafka.framework.settings --write-docs docs/framework.md"


class AsyncJobs(Consumer):
    async def consume_one(self, message):
        pass


@pytest.mark.parametrize(("consumer", "settings", "key", "text"), [
    (Jobs, {"executor": "async"}, "executor", "'async' needs an async def consume_one; Jobs's is a plain function"),
    (AsyncJobs, {"executor": "process"}, "executor", "'process' cannot run AsyncJobs's async def methods"),
    (Jobs, {"dead_letter_topic": "jobs"}, "dead_letter_topic", "is the route's own topic"),
])
def test_settings_that_cannot_hold_with_this_consumer_or_topic(consumer, settings, key, text):
    app = App(NOWHERE)
    app.share_group("workers").topic("jobs", consumer, **settings)
    message = problem_of(app)
    assert message.startswith(f"route 'workers/jobs': {key}: ") and text in message, message


@pytest.mark.parametrize("name", ["group.id", "enable.auto.commit", "auto.offset.reset", "enable.partition.eof"])
def test_consumer_group_kafka_configs_the_framework_sets_are_refused(name):
    app = App(NOWHERE)
    app.consumer_group("audit").topic("orders", Jobs, kafka={name: "x"})
    assert problem_of(app) == f"route 'audit/orders': kafka['{name}']: is set by the framework (group name, manual " \
                              "commits, auto_offset_reset)"


def test_a_route_declared_after_validation_is_validated_and_run():
    app = App(NOWHERE)
    app.share_group("workers").topic("jobs", Jobs)
    assert [r.name for r in app.routes()] == ["workers/jobs"]
    app.share_group("workers").topic("mail", Jobs)
    assert [r.name for r in app.routes()] == ["workers/jobs", "workers/mail"]


def test_a_consumer_need_not_call_super_init():
    from quafka.framework.testing import consume, message

    class Stateful(Consumer):
        def __init__(self):
            self.seen = 0

        def consume_one(self, message):
            self.seen += 1
            self.reject(message)

    assert consume(Stateful, [message(b"x")]).rejected == [b"x"]
