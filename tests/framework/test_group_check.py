"""The group settings check (framework/group_check.py) against a real broker over loopback: a route
compared with its group's configs at start (one WARNING line per difference, naming both values
and the command that fixes it), the declared ``group_configs`` validated, and applied with
``apply_group_configs=True`` (the diff logged first, then the configs set). Records are produced
with confluent-kafka; groups are read back with quafka's Admin."""

from __future__ import annotations

import argparse
import logging
import re
import shlex
import subprocess
import sys
import uuid

import pytest
from support.framework_jobs import Jobs, create_topic, share_group_from_earliest

from quafka.broker._config_defs import GROUP_KEYS
from quafka.cli.worker import _child_argv, add_parser
from quafka.client import Admin
from quafka.framework import App, RouteConfigError, Worker
from quafka.framework.group_check import compare
from quafka.framework.settings import GROUP_CONFIG_TYPES

LIMIT = "share.delivery.count.limit"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def messages(caplog, containing: str) -> list[str]:
    return [r.getMessage() for r in list(caplog.records) if containing in r.getMessage()]


def share_app(bs: str, group: str, topic: str, **settings) -> App:
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(topic, Jobs, **settings)
    return app


def started(app: App, **kwargs) -> Worker:
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=5, **kwargs)
    worker.start()
    return worker


def stop(worker: Worker) -> None:
    worker.stop()
    assert worker.wait() == 0


def group_config(bs: str, group: str, name: str) -> str | None:
    with Admin({"bootstrap.servers": bs}) as admin:
        return admin.describe_configs("group", group)[name]


def test_the_known_group_configs_are_the_brokers():
    """settings.GROUP_CONFIG_TYPES (the framework may not import the broker) lists exactly the
    group configs quafka's broker declares, with their types."""
    assert GROUP_CONFIG_TYPES == {key.name: key.type for key in GROUP_KEYS.values()}


def test_declared_group_configs_are_validated_before_anything_connects():
    app = App({"bootstrap.servers": "127.0.0.1:1"})  # nothing listens: validation does not connect
    app.share_group("g1").topic("t1", Jobs, group_configs={"share.delivery.count.limt": 5})
    app.share_group("g2").topic("t2", Jobs, group_configs={LIMIT: "five"})
    app.share_group("g3").topic("t3", Jobs, group_configs={"quafka.share.redelivery.backoff.ms": 100})
    app.consumer_group("c1").topic("t4", Jobs, group_configs={LIMIT: 5})
    app.share_group("g5").topic("t5", Jobs, group_configs={LIMIT: 3}, delivery_count_limit=4)
    app.share_group("g6").topic("t6", Jobs, group_configs=[LIMIT])
    with pytest.raises(RouteConfigError) as caught:
        app.validate()
    text = str(caught.value)
    assert "route 'g1/t1': group_configs: 'share.delivery.count.limt' is not a group config; did you mean " \
           "'share.delivery.count.limit'?" in text
    assert "route 'g2/t2': group_configs: share.delivery.count.limit: must be a int, got 'five'" in text
    assert "quafka.share.redelivery.backoff.ms is set by the framework from the route's backoff" in text
    assert "route 'c1/t4': group_configs['share.delivery.count.limit']: is a share-group config; this is a " \
           "consumer-group route" in text
    assert "route 'g5/t5': group_configs['share.delivery.count.limit']: 3 differs from the route's " \
           "delivery_count_limit 4" in text
    assert "route 'g6/t6': group_configs: must be a dict of group configs" in text
    assert len(caught.value.problems) == 6


def test_a_declared_limit_becomes_the_routes_and_is_checked_against_max_attempts():
    app = App({"bootstrap.servers": "127.0.0.1:1"})
    app.share_group("g").topic("t", Jobs, group_configs={LIMIT: 2}, max_attempts=3)
    with pytest.raises(RouteConfigError, match="max_attempts: 3 exceeds delivery_count_limit 2"):
        app.validate()
    ok = App({"bootstrap.servers": "127.0.0.1:1"})
    ok.share_group("g").topic("t", Jobs, group_configs={LIMIT: 7, "share.record.lock.duration.ms": "45000"},
                              max_attempts=6)
    [route] = ok.validate()
    assert route.settings["delivery_count_limit"] == 7 and route.settings["lock_duration_ms"] == 45000


def test_routes_of_one_group_declaring_different_values_are_refused_by_validation():
    app = App({"bootstrap.servers": "127.0.0.1:1"})
    app.share_group("g").topic("a", Jobs, group_configs={LIMIT: 5})
    app.share_group("g").topic("b", Jobs, group_configs={LIMIT: "6"})
    with pytest.raises(RouteConfigError, match=r"route 'g/b': group_configs\['share.delivery.count.limit'\]: "
                                               r"'6' differs from route 'g/a''s '5'; group 'g' has one "
                                               r"share.delivery.count.limit"):
        Worker(app, handle_signals=False)  # App.validate: refused before anything connects


def test_max_attempts_above_the_groups_limit_is_one_warning_whose_fix_works(make_broker, caplog):
    """The issue's case: the group's share.delivery.count.limit is 2 and the app's max_attempts 3.
    The warning names the route, both values and a command; running that command fixes the group."""
    caplog.set_level(logging.INFO, logger="quafka.framework")
    broker = make_broker()
    bs = broker.bootstrap_servers
    topic, group = unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group, **{LIMIT: "2"})
    worker = started(share_app(bs, group, topic, max_attempts=3, lock_duration_ms=20_000))
    try:
        assert worker.runtime.group_configs[f"{group}/{topic}"][LIMIT] == "2"  # the lead's effective limit reads it
    finally:
        stop(worker)
    [warning] = messages(caplog, "max_attempts 3 exceeds")
    assert warning.startswith(f"route {group}/{topic}: max_attempts 3 exceeds share.delivery.count.limit 2 of "
                              f"group {group}: the broker gives a record up at delivery 2, so the worker gives a "
                              "failing job up there")
    command = re.search(r"fix: (quafka configs .*)$", warning).group(1)
    assert command == (f"quafka configs --bootstrap-server {bs} --entity-type groups --entity-name {group} --alter "
                       f"--add-config share.delivery.count.limit=3")
    [lock] = messages(caplog, "lock_duration_ms 20000 differs")  # the broker's default lock is 30 s
    assert f"share.record.lock.duration.ms 30000 of group {group}: " in lock
    assert "share.record.lock.duration.ms=20000" in lock and "(or lock_duration_ms=30000 on the route)" in lock
    [record] = [r for r in caplog.records if "max_attempts 3 exceeds" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert messages(caplog, f"group {group}: a worker that joins may wait up to 6.0 s for its partitions")

    done = subprocess.run([sys.executable, "-m", "quafka", *shlex.split(command)[1:]], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert group_config(bs, group, LIMIT) == "3"
    caplog.clear()
    stop(started(share_app(bs, group, topic, max_attempts=3, lock_duration_ms=20_000)))
    assert messages(caplog, "max_attempts 3 exceeds") == []  # fixed: no warning any more


def test_declared_group_configs_warn_without_apply_and_are_set_with_it(make_broker, caplog):
    caplog.set_level(logging.INFO, logger="quafka.framework")
    broker = make_broker()
    bs = broker.bootstrap_servers
    topic, group = unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group, **{LIMIT: "2"})
    declared = {LIMIT: "5", "share.auto.offset.reset": "earliest"}

    stop(started(share_app(bs, group, topic, max_attempts=3, group_configs=declared)))
    [warning] = messages(caplog, "group_configs sets")
    assert warning == (f"route {group}/{topic}: group_configs sets share.delivery.count.limit=5 but group {group} has "
                       f"share.delivery.count.limit=2; fix: quafka configs --bootstrap-server {bs} --entity-type "
                       f"groups --entity-name {group} --alter --add-config share.delivery.count.limit=5, or start the "
                       "worker with --apply-group-configs")
    assert group_config(bs, group, LIMIT) == "2"  # only a warning

    caplog.clear()
    worker = started(share_app(bs, group, topic, max_attempts=3, group_configs=declared), apply_group_configs=True)
    try:
        assert group_config(bs, group, LIMIT) == "5"  # read back from the broker
        assert worker.runtime.group_configs[f"{group}/{topic}"][LIMIT] == "5"
    finally:
        stop(worker)
    logged = [r.getMessage() for r in caplog.records]
    diff = logged.index(f"group {group}: share.delivery.count.limit 2 -> 5 (--apply-group-configs, routes "
                        f"{group}/{topic})")
    assert logged.index(f"group {group}: applied 1 group config") > diff  # the diff first, then the change
    assert messages(caplog, "group_configs sets") == [] and messages(caplog, "exceeds") == []

    caplog.clear()
    stop(started(share_app(bs, group, topic, max_attempts=3, group_configs=declared), apply_group_configs=True))
    assert messages(caplog, f"group {group}: group configs already as declared")


def test_a_group_dead_letter_topic_the_route_does_not_know_is_warned(make_broker, caplog):
    caplog.set_level(logging.INFO, logger="quafka.framework")
    bs = make_broker().bootstrap_servers
    topic, group, dlq = unique("jobs"), unique("workers"), unique("dlq.jobs")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group, **{"errors.deadletterqueue.topic.name": dlq})
    stop(started(share_app(bs, group, topic)))
    [warning] = messages(caplog, "dead_letter_topic")
    assert warning == (f"route {group}/{topic}: dead_letter_topic None differs from errors.deadletterqueue.topic.name "
                       f"'{dlq}' of group {group}: the broker writes the group's rejected and exhausted records to "
                       f"'{dlq}'; fix: quafka configs --bootstrap-server {bs} --entity-type groups --entity-name {group} "
                       f"--alter --delete-config errors.deadletterqueue.topic.name (or dead_letter_topic='{dlq}' on the "
                       "route)")
    command = warning.split("fix: ")[1].split(" (or ")[0]
    done = subprocess.run([sys.executable, "-m", "quafka", *shlex.split(command)[1:]], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert group_config(bs, group, "errors.deadletterqueue.topic.name") == ""


def test_broker_written_dead_letters_without_the_record_are_warned():
    """compare() is pure: the copy setting matters only where the broker writes the letters."""
    app = App({"bootstrap.servers": "127.0.0.1:1"})
    app.share_group("g").topic("t", Jobs, dead_letter_topic="dlq.t")
    [route] = app.validate()
    configs = {"errors.deadletterqueue.topic.name": "dlq.t", "errors.deadletterqueue.copy.record.enable": "false"}
    [line] = compare(route, configs, "kafka:9092", dead_letter_mode="broker")
    assert line == ("route g/t: errors.deadletterqueue.copy.record.enable of group g is false, so the dead letters "
                    "the broker writes for this route carry the source topic, partition and offset but not the "
                    "record's key and value; fix: quafka configs --bootstrap-server kafka:9092 --entity-type groups "
                    "--entity-name g --alter --add-config errors.deadletterqueue.copy.record.enable=true")
    assert compare(route, configs, "kafka:9092", dead_letter_mode="produce") == []


def test_the_cli_passes_strict_and_apply_group_configs_on_to_its_processes():
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["worker", "myapp:app", "--processes", "2", "--strict", "--apply-group-configs"])
    assert args.strict and args.apply_group_configs
    argv = _child_argv(args)
    assert argv[:4] == ["worker", "myapp:app", "--processes", "1"]
    assert "--strict" in argv and "--apply-group-configs" in argv
    plain = _child_argv(parser.parse_args(["worker", "myapp:app", "--processes", "2"]))
    assert "--strict" not in plain and "--apply-group-configs" not in plain
