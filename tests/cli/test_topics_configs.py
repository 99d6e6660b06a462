"""`quafka topics` and `quafka configs` end to end against an embedded broker: Kafka 4.4's output
formats (kafka-topics.sh, kafka-configs.sh) and exit codes."""

import re

from cli.helpers import cli, run_quafka


DESCRIBE_TOPIC = re.compile(r"Topic: (\S+)\tTopicId: ([A-Za-z0-9_-]{22})\tPartitionCount: (\d+)\t"
                            r"ReplicationFactor: 1\tConfigs: (.*)")
DESCRIBE_PARTITION = re.compile(r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+)\tReplicas: (\d+)\tIsr: (\d+)"
                                r"\tElr: N/A\tLastKnownElr: N/A")


def test_topics_create_list_describe_alter_delete(broker, capsys):
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    code, out, err = cli(capsys, "topics", *bs, "--create", "--topic", "jobs", "--partitions", "2",
                         "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete")
    assert (code, out, err) == (0, "Created topic jobs.\n", "")

    code, out, err = cli(capsys, "topics", *bs, "--create", "--topic", "jobs")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("Error: ") and "already exists" in err

    assert cli(capsys, "topics", *bs, "--create", "--topic", "jobs", "--if-not-exists") == (0, "", "")
    assert cli(capsys, "topics", *bs, "--create", "--topic", "other")[0] == 0

    code, out, _ = cli(capsys, "topics", *bs, "--list", "--exclude-internal")
    assert (code, out) == (0, "jobs\nother\n")
    code, out, _ = cli(capsys, "topics", *bs, "--list", "--topic", "j.*")
    assert (code, out) == (0, "jobs\n")

    code, out, _ = cli(capsys, "topics", *bs, "--describe", "--topic", "jobs")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    head = DESCRIBE_TOPIC.fullmatch(lines[0])
    assert head and head.group(1) == "jobs" and head.group(3) == "2"
    # only the overridden (non-default) configs, comma-separated, sorted by name as Kafka's broker returns them;
    # min.insync.replicas is the cluster-level one a new Kafka 4.1+ cluster has (ELR, core/elr.py)
    assert set(head.group(4).split(",")) == {"cleanup.policy=delete", "min.insync.replicas=1", "retention.ms=3600000"}
    for i, line in enumerate(lines[1:]):
        m = DESCRIBE_PARTITION.fullmatch(line)
        assert m and m.group(1) == "jobs" and int(m.group(2)) == i and m.group(3) == m.group(4) == m.group(5)

    assert cli(capsys, "topics", *bs, "--alter", "--topic", "jobs", "--partitions", "3") == (0, "", "")
    code, out, _ = cli(capsys, "topics", *bs, "--describe", "--topic", "jobs")
    assert "\tPartitionCount: 3\t" in out.splitlines()[0] and len(out.splitlines()) == 4
    code, _, err = cli(capsys, "topics", *bs, "--alter", "--topic", "jobs", "--partitions", "2")
    assert code == 1 and err.startswith("Error: ") and "INVALID_PARTITIONS" in err

    assert cli(capsys, "topics", *bs, "--delete", "--topic", "other") == (0, "", "")
    code, out, err = cli(capsys, "topics", *bs, "--delete", "--topic", "other")
    assert (code, out, err) == (1, "", "Error: Topic 'other' does not exist as expected\n")
    assert cli(capsys, "topics", *bs, "--delete", "--topic", "other", "--if-exists") == (0, "", "")
    code, out, _ = cli(capsys, "topics", *bs, "--list", "--exclude-internal")
    assert out == "jobs\n"

    # option errors: one line, exit code 1 (Kafka's), not argparse's 2
    code, out, err = cli(capsys, "topics", *bs, "--list", "--describe")
    assert code == 1 and err.startswith("Error: Command must include exactly one action") and err.count("\n") == 1
    code, _, err = cli(capsys, "topics", *bs, "--create")
    assert code == 1 and "--topic" in err


def test_topics_subprocess(broker):
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    done = run_quafka("topics", *bs, "--create", "--topic", "orders", "--partitions", "3")
    assert (done.returncode, done.stdout, done.stderr) == (0, "Created topic orders.\n", "")
    done = run_quafka("topics", *bs, "--describe", "--topic", "orders")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert DESCRIBE_TOPIC.fullmatch(lines[0]).group(3) == "3"
    assert [DESCRIBE_PARTITION.fullmatch(line).group(2) for line in lines[1:]] == ["0", "1", "2"]
    done = run_quafka("topics", *bs, "--describe", "--topic", "nope")
    assert done.returncode == 1 and done.stderr == "Error: Topic 'nope' does not exist as expected\n"
    done = run_quafka("topics", *bs, "--no-such-option")
    assert done.returncode == 1 and done.stderr.startswith("Error: unrecognized arguments: --no-such-option")


def test_configs_groups_topics_brokers(broker, capsys):
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    group = ["--entity-type", "groups", "--entity-name", "orders"]
    code, out, err = cli(capsys, "configs", *bs, *group, "--alter",
                         "--add-config", "share.auto.offset.reset=earliest,share.record.lock.duration.ms=60000")
    assert (code, out, err) == (0, "Completed updating config for group orders.\n", "")
    code, out, _ = cli(capsys, "configs", *bs, *group, "--describe")
    assert code == 0
    assert out.splitlines() == [
        "Dynamic configs for group orders are:",
        "  share.auto.offset.reset=earliest sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}",
        "  share.record.lock.duration.ms=60000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "share.record.lock.duration.ms=60000, DEFAULT_CONFIG:group.share.record.lock.duration.ms=30000}",
    ]
    code, out, _ = cli(capsys, "configs", *bs, *group, "--describe", "--all")
    lines = out.splitlines()
    assert lines[0] == "All configs for group orders are:"
    assert "  share.delivery.count.limit=5 sensitive=false synonyms={DEFAULT_CONFIG:group.share.delivery.count.limit=5}" in lines
    assert lines[1:] == sorted(lines[1:], key=lambda line: line.split("=")[0])  # by name, as kafka-configs

    assert cli(capsys, "configs", *bs, *group, "--alter", "--delete-config", "share.record.lock.duration.ms")[0] == 0
    code, out, _ = cli(capsys, "configs", *bs, "--group", "orders", "--describe")
    assert out.count("\n") == 2 and "share.record.lock.duration.ms" not in out

    code, out, err = cli(capsys, "configs", *bs, *group, "--alter", "--delete-config", "nope")
    assert (code, out, err) == (1, "", "Error: Invalid config(s): nope\n")
    code, out, err = cli(capsys, "configs", *bs, *group, "--alter", "--add-config", "share.auto.offset.reset=soon")
    assert code == 1 and err.count("\n") == 1 and "INVALID_CONFIG" in err and "share.auto.offset.reset" in err
    code, _, err = cli(capsys, "configs", *bs, *group, "--alter", "--add-config", "novalue")
    assert code == 1 and 'format "key=val"' in err

    # topics: brackets group a value with commas; brokers: per-node and cluster-default dynamic configs
    assert cli(capsys, "topics", *bs, "--create", "--topic", "jobs")[0] == 0
    code, out, _ = cli(capsys, "configs", *bs, "--entity-type", "topics", "--entity-name", "jobs", "--alter",
                       "--add-config", "retention.ms=1000,follower.replication.throttled.replicas=[0:1,1:1]")
    assert out == "Completed updating config for topic jobs.\n"
    code, out, _ = cli(capsys, "configs", *bs, "--entity-type", "topics", "--entity-name", "jobs", "--describe")
    assert out.splitlines()[0] == "Dynamic configs for topic jobs are:"
    assert out.splitlines()[1] == ("  follower.replication.throttled.replicas=0:1,1:1 sensitive=false "
                                   "synonyms={DYNAMIC_TOPIC_CONFIG:follower.replication.throttled.replicas=0:1,1:1}")
    assert out.splitlines()[2].startswith("  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000")
    code, out, _ = cli(capsys, "configs", *bs, "--entity-type", "brokers", "--entity-default", "--alter",
                       "--add-config", "message.max.bytes=2000000")
    assert (code, out) == (0, "Completed updating default config for brokers in the cluster.\n")
    code, out, _ = cli(capsys, "configs", *bs, "--entity-type", "brokers", "--describe")
    assert out.splitlines() == [
        "Dynamic configs for broker 1 are:",
        "Default configs for brokers in the cluster are:",
        "  message.max.bytes=2000000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000000}",
        # written when the cluster was formatted with eligible.leader.replicas.version 1 (core/elr.py)
        "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}",
    ]
    code, _, err = cli(capsys, "configs", *bs, "--entity-type", "topics", "--entity-name", "nope", "--describe")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    assert cli(capsys, "configs", *bs, "--entity-type", "groups", "--entity-name", "g") == (
        1, "", "Error: Command must include exactly one action: --describe, --alter\n")


def test_configs_subprocess_and_unreachable_broker(broker):
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    done = run_quafka("configs", *bs, "--entity-type", "groups", "--entity-name", "g", "--alter",
                      "--add-config", "share.delivery.count.limit=3")
    assert (done.returncode, done.stdout, done.stderr) == (0, "Completed updating config for group g.\n", "")
    done = run_quafka("configs", *bs, "--entity-type", "groups", "--entity-name", "g", "--describe")
    assert done.returncode == 0 and done.stdout.splitlines()[1].startswith("  share.delivery.count.limit=3 ")
    done = run_quafka("configs", "--bootstrap-server", "127.0.0.1:1", "--entity-type", "groups", "--entity-name", "g",
                      "--describe")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1 and "127.0.0.1:1" in done.stderr
