"""`quafka consumer-groups` end to end against an embedded broker: Kafka 4.4's
kafka-consumer-groups.sh output formats and exit codes for simple groups (consumers that assign()
and commit) — --list (--state, --type), --describe (offsets, --members, --state), every
--reset-offsets scenario with --dry-run / --execute / --export / --from-file, --delete-offsets and
--delete."""

from __future__ import annotations

import datetime
import itertools

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cli.helpers import cli

from quafka.cli.consumer_groups import parse_duration
from quafka.cli._common import ToolError
from quafka.client import Admin

T_OLD = 1_700_000_000_000          # partition 0: offsets 0-4; partition 1: offsets 0-9
T_NEW = T_OLD + 600_000            # partition 0: offsets 5-9
NO_MEMBERS = "\nConsumer group '{}' has no active members.\n"
OFFSETS_HEADER = ("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
                  "CONSUMER-ID     HOST            CLIENT-ID")
RESET_HEADER = "GROUP           TOPIC           PARTITION  NEW-OFFSET"
_NAMES = itertools.count(1)


def kafka_datetime(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def offsets_row(group, topic, partition, current, end, lag):
    return (f"{group:<15} {topic:<15} {partition:<10} {current:<15} {end:<15} {lag:<15} "
            f"{'-':<15} {'-':<15} -")


def reset_row(group, topic, partition, offset):
    return f"{group:<15} {topic:<15} {partition:<10} {offset}"


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in (0, 1)],
                                                                      timeout=10)}
    finally:
        consumer.close()


@pytest.fixture
def topic(bootstrap):
    """A two-partition topic of its own per test: partition 0 offsets 0-4 at T_OLD, 5-9 at T_NEW;
    partition 1 offsets 0-9 at T_OLD."""
    name = f"cg-topic-{next(_NAMES)}"  # short: Kafka's minimum column widths hold
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({name: (2, 1)})
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(name, b"r", partition=0, timestamp=T_OLD if i < 5 else T_NEW)
        producer.produce(name, b"r", partition=1, timestamp=T_OLD)
    assert producer.flush(10) == 0
    return name


def tool(capsys, bootstrap, *args):
    return cli(capsys, "consumer-groups", "--bootstrap-server", bootstrap, *args)


def test_list_with_state_and_type(bootstrap, topic, capsys):
    commit(bootstrap, "list-a", {(topic, 0): 1})
    commit(bootstrap, "list-bb", {(topic, 1): 2})
    code, out, err = tool(capsys, bootstrap, "--list")
    assert code == 0 and err == ""
    assert {"list-a", "list-bb"} <= set(out.splitlines())
    code, out, _ = tool(capsys, bootstrap, "--list", "--state")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "GROUP                     STATE"  # Kafka: max(15, longest) + 10
    assert "list-a                    Empty" in lines
    code, out, _ = tool(capsys, bootstrap, "--list", "--type", "--state", "empty,stable")
    assert code == 0 and out.splitlines()[0] == "GROUP                     TYPE                 STATE"
    assert "list-bb                   Classic              Empty" in out.splitlines()
    code, out, _ = tool(capsys, bootstrap, "--list", "--type", "consumer")
    assert (code, out) == (0, "GROUP                     TYPE\n")  # no consumer-protocol (KIP-848) groups
    code, out, _ = tool(capsys, bootstrap, "--list", "--state", "Stable")
    assert (code, out) == (0, "GROUP                     STATE\n")
    code, out, err = tool(capsys, bootstrap, "--list", "--state", "Busy")
    assert (code, out) == (1, "")
    assert err == ("Error: Invalid state list 'Busy'. Valid states are: PreparingRebalance, CompletingRebalance, "
                   "Stable, Dead, Empty, Assigning, Reconciling\n")
    code, _, err = tool(capsys, bootstrap, "--list", "--type", "share")
    assert (code, err) == (1, "Error: Invalid types list 'share'. Valid types are: Classic, Consumer\n")


def test_describe_offsets_members_state(bootstrap, topic, capsys):
    commit(bootstrap, "desc", {(topic, 0): 3, (topic, 1): 10})
    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "desc")
    assert code == 0 and err == NO_MEMBERS.format("desc")
    assert out == "\n".join(["", OFFSETS_HEADER, offsets_row("desc", topic, 0, 3, 10, 7),
                             offsets_row("desc", topic, 1, 10, 10, 0)]) + "\n"
    assert tool(capsys, bootstrap, "--describe", "--group", "desc", "--offsets")[1] == out

    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "desc", "--verbose")
    assert code == 0 and out.splitlines()[1].split() == [
        "GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
        "HOST", "CLIENT-ID"]
    assert out.splitlines()[2].split() == ["desc", topic, "0", "-", "3", "10", "7", "-", "-", "-"]

    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "desc", "--members")
    assert (code, err) == (0, NO_MEMBERS.format("desc"))
    assert out == "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS\n"

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        node = admin.find_coordinator("desc")
    coordinator = f"{node.host}:{node.port}  ({node.node_id})"
    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "desc", "--state")
    assert (code, err) == (0, NO_MEMBERS.format("desc"))
    width = max(25, len(coordinator))
    assert out == ("\n" + f"{'GROUP':<15} {'COORDINATOR (ID)':<{width}} {'ASSIGNMENT-STRATEGY':<20} "
                   f"{'STATE':<20} #MEMBERS\n" + f"{'desc':<15} {coordinator:<{width}} {'-':<20} {'Empty':<20} 0\n")

    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "nobody")
    assert (code, out, err) == (1, "", "Error: Consumer group 'nobody' does not exist.\n")
    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "nobody", "--state")
    assert (code, out, err) == (1, "", "Error: Consumer group 'nobody' does not exist.\n")

    code, out, err = tool(capsys, bootstrap, "--describe", "--all-groups")
    assert code == 0 and offsets_row("desc", topic, 0, 3, 10, 7) in out.splitlines()


def test_reset_scenarios_dry_run_and_execute(bootstrap, topic, capsys):
    group = "reset"
    commit(bootstrap, group, {(topic, 0): 3, (topic, 1): 4})
    reset = ["--reset-offsets", "--group", group]

    def plan(*args, code=0):
        got, out, err = tool(capsys, bootstrap, *reset, *args)
        assert got == code, err
        return out, err

    header = ["", RESET_HEADER]
    out, err = plan("--topic", topic, "--to-earliest", "--dry-run")
    assert out == "\n".join(header + [reset_row(group, topic, 0, 0), reset_row(group, topic, 1, 0)]) + "\n"
    assert err == "" and committed(bootstrap, group, topic) == {0: 3, 1: 4}  # a dry run changes nothing

    out, _ = plan("--topic", f"{topic}:1", "--to-latest", "--dry-run")
    assert out == "\n".join(header + [reset_row(group, topic, 1, 10)]) + "\n"

    out, err = plan("--all-topics", "--to-offset", "12", "--dry-run")
    assert out.splitlines()[2:] == [reset_row(group, topic, 0, 10), reset_row(group, topic, 1, 10)]
    assert err == (f"Warning: New offset (12) is higher than latest offset for topic partition {topic}-0. "
                   f"Value will be set to 10.\n"
                   f"Warning: New offset (12) is higher than latest offset for topic partition {topic}-1. "
                   f"Value will be set to 10.\n")

    out, _ = plan("--all-topics", "--shift-by", "-4", "--dry-run")  # 3-4 clamped to the log start
    assert out.splitlines()[2:] == [reset_row(group, topic, 0, 0), reset_row(group, topic, 1, 0)]
    out, _ = plan("--all-topics", "--shift-by", "2", "--dry-run")
    assert out.splitlines()[2:] == [reset_row(group, topic, 0, 5), reset_row(group, topic, 1, 6)]

    out, _ = plan("--all-topics", "--to-datetime", kafka_datetime(T_NEW), "--dry-run")
    assert out.splitlines()[2:] == [reset_row(group, topic, 0, 5), reset_row(group, topic, 1, 10)]
    out, err = plan("--topic", f"{topic}:1", "--to-datetime", kafka_datetime(T_NEW + 1), "--dry-run")
    assert out.splitlines()[2:] == [reset_row(group, topic, 1, 10)]
    assert err == f"Warn: Partition 1 from topic {topic} is empty. Falling back to latest known offset.\n"

    out, _ = plan("--all-topics", "--by-duration", "P36500D", "--dry-run")  # a century ago: the log start
    assert out.splitlines()[2:] == [reset_row(group, topic, 0, 0), reset_row(group, topic, 1, 0)]
    out, _ = plan("--all-topics", "--by-duration", "PT0S", "--dry-run")  # now: after every record
    assert out.splitlines()[2:] == [reset_row(group, topic, 0, 10), reset_row(group, topic, 1, 10)]

    out, _ = plan("--all-topics", "--to-current", "--dry-run")
    assert out.splitlines()[2:] == [reset_row(group, topic, 0, 3), reset_row(group, topic, 1, 4)]

    # no --dry-run / --execute: Kafka's warning, and a dry run
    out, err = plan("--all-topics", "--to-earliest")
    assert err.startswith("WARN: No action will be performed as the --execute option is missing.")
    assert committed(bootstrap, group, topic) == {0: 3, 1: 4}

    out, _ = plan("--topic", topic, "--to-offset", "7", "--execute")
    assert out.splitlines()[2:] == [reset_row(group, topic, 0, 7), reset_row(group, topic, 1, 7)]
    assert committed(bootstrap, group, topic) == {0: 7, 1: 7}
    plan("--topic", f"{topic}:0", "--shift-by", "-2", "--execute")
    assert committed(bootstrap, group, topic) == {0: 5, 1: 7}


def test_reset_export_from_file_and_new_group(bootstrap, topic, capsys, tmp_path):
    group = "export"
    commit(bootstrap, group, {(topic, 0): 2, (topic, 1): 8})
    code, out, err = tool(capsys, bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-current",
                          "--dry-run", "--export")
    assert (code, err) == (0, "")
    assert out == f"{topic},0,2\n{topic},1,8\n\n"
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,1\n{topic},1,99\n")
    code, out, err = tool(capsys, bootstrap, "--reset-offsets", "--group", group, "--from-file", str(plan),
                          "--execute")
    assert code == 0 and out.splitlines()[2:] == [reset_row(group, topic, 0, 1), reset_row(group, topic, 1, 10)]
    assert "Value will be set to 10" in err
    assert committed(bootstrap, group, topic) == {0: 1, 1: 10}

    # a group that does not exist yet is reset (and so created), as Kafka does for a Dead group
    code, out, _ = tool(capsys, bootstrap, "--reset-offsets", "--group", "fresh", "--topic", topic, "--to-earliest",
                        "--execute")
    assert code == 0 and committed(bootstrap, "fresh", topic) == {0: 0, 1: 0}
    # two groups: the export names the group
    code, out, _ = tool(capsys, bootstrap, "--reset-offsets", "--group", "fresh", "--group", group, "--topic",
                        f"{topic}:0", "--to-latest", "--dry-run", "--export")
    assert (code, out) == (0, f"fresh,{topic},0,10\n{group},{topic},0,10\n\n")


def test_reset_errors(bootstrap, topic, capsys, tmp_path):
    base = ["--reset-offsets", "--group", "errs"]
    cases = [
        (["--topic", topic, "--dry-run"], "Option --reset-offsets requires one of the following scenarios: "
         "--to-offset, --shift-by, --to-datetime, --by-duration, --to-earliest, --to-latest, --to-current, "
         "--from-file"),
        (["--topic", topic, "--to-earliest", "--to-latest", "--dry-run"],
         "Option --to-earliest can't be used with option --to-latest"),
        (["--to-earliest", "--dry-run"], "One of the reset scopes should be defined: --all-topics, --topic."),
        (["--topic", topic, "--to-earliest", "--dry-run", "--execute"],
         "Option --reset-offsets only accepts one of --execute and --dry-run"),
        (["--topic", f"{topic}:7", "--to-earliest", "--dry-run"], f'The partitions "{topic}-7" do not exist'),
        (["--topic", "nosuch", "--to-earliest", "--dry-run"],
         "Topic 'nosuch' does not exist (UNKNOWN_TOPIC_OR_PARTITION)"),
        (["--topic", topic, "--shift-by", "1", "--dry-run"],
         f"Cannot shift offset for partition {topic}-0 since there is no current committed offset"),
        (["--topic", topic, "--by-duration", "1h", "--dry-run"],
         "Text cannot be parsed to a Duration: 1h (expected PnDTnHnMnS, e.g. PT30M or P1DT2H)"),
        (["--from-file", str(tmp_path / "none.csv"), "--dry-run"],
         f"cannot read {tmp_path / 'none.csv'}: No such file or directory"),
    ]
    for args, message in cases:
        code, out, err = tool(capsys, bootstrap, *base, *args)
        assert (code, out, err) == (1, "", f"Error: {message}\n"), args


def test_delete_offsets(bootstrap, topic, capsys):
    group = "delo"
    commit(bootstrap, group, {(topic, 0): 3, (topic, 1): 4})
    code, out, err = tool(capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
    assert (code, err) == (0, "")
    assert out == (f"Request succeeded for deleting offsets from group {group}.\n\n"
                   f"{'TOPIC':<15} PARTITION  STATUS\n{topic:<15} {0:<10} Successful\n")
    assert committed(bootstrap, group, topic) == {0: -1001, 1: 4}

    code, out, err = tool(capsys, bootstrap, "--delete-offsets", "--group", group, "--topic", topic,
                          "--topic", "nosuch")
    assert code == 1
    assert out == ("\n" + f"{'TOPIC':<15} PARTITION  STATUS\n"
                   f"{topic:<15} {0:<10} Successful\n{topic:<15} {1:<10} Successful\n"
                   f"{'nosuch':<15} {'-':<10} Error: Topic 'nosuch' does not exist (UNKNOWN_TOPIC_OR_PARTITION)\n")
    assert err == "Error: Encountered some partition-level error, see the follow-up details.\n"
    assert committed(bootstrap, group, topic) == {0: -1001, 1: -1001}

    code, out, err = tool(capsys, bootstrap, "--delete-offsets", "--group", "nobody", "--topic", topic)
    assert (code, out, err) == (1, "", "Error: Consumer group 'nobody' does not exist.\n")
    code, out, err = tool(capsys, bootstrap, "--delete-offsets", "--group", group)
    assert (code, err) == (1, "Error: Option --delete-offsets takes the following options: --group (one), --topic\n")


def test_delete_groups(bootstrap, topic, capsys):
    commit(bootstrap, "del-a", {(topic, 0): 1})
    commit(bootstrap, "del-b", {(topic, 0): 1})
    code, out, err = tool(capsys, bootstrap, "--delete", "--group", "del-a", "--group", "del-b")
    assert (code, out, err) == (0, "Deletion of requested consumer groups ('del-a', 'del-b') was successful.\n", "")
    assert committed(bootstrap, "del-a", topic)[0] == -1001
    assert "del-a" not in tool(capsys, bootstrap, "--list")[1].splitlines()

    commit(bootstrap, "del-c", {(topic, 0): 1})
    code, out, err = tool(capsys, bootstrap, "--delete", "--group", "del-c", "--group", "del-a")
    assert code == 1
    assert out == "These consumer groups were deleted successfully: 'del-c'\n"
    assert err == "Error: Group 'del-a' could not be deleted due to: Consumer group 'del-a' does not exist.\n"
    code, out, err = tool(capsys, bootstrap, "--delete", "--group", "x", "--topic", topic)
    assert (code, err) == (1, "Error: The consumer does not support topic-specific offset deletion from a "
                              "consumer group.\n")


def test_options_and_help(bootstrap, capsys):
    code, out, err = tool(capsys, bootstrap)
    assert (code, err) == (1, "Error: Command must include exactly one action: --list, --describe, --delete, "
                              "--reset-offsets, --delete-offsets\n")
    assert tool(capsys, bootstrap, "--describe")[2] == \
        "Error: Option --describe takes one of these options: --all-groups, --group\n"
    assert tool(capsys, bootstrap, "--describe", "--group", "g", "--members", "--state")[2] == \
        "Error: Option --describe takes at most one of these options: --members, --offsets, --state\n"
    assert tool(capsys, bootstrap, "--describe", "--group", "g", "--type")[2] == \
        "Error: Option --type can only be used with --list\n"
    assert tool(capsys, bootstrap, "--list", "--to-earliest")[2] == \
        "Error: Option --to-earliest can only be used with --reset-offsets\n"
    with pytest.raises(SystemExit) as exit_info:
        tool(capsys, bootstrap, "--list", "--bogus")
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith("Error: unrecognized arguments: --bogus")
    with pytest.raises(SystemExit) as exit_info:
        cli(capsys, "consumer-groups", "--help")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "quafka consumer-groups --reset-offsets --group billing" in out and "--by-duration" in out


def test_parse_duration():
    assert parse_duration("PT1H30M") == datetime.timedelta(hours=1, minutes=30)
    assert parse_duration("P1DT2.5S") == datetime.timedelta(days=1, seconds=2.5)
    assert parse_duration("-PT5M") == -datetime.timedelta(minutes=5)
    for bad in ("P", "PT", "1h", "P1H"):
        with pytest.raises(ToolError):
            parse_duration(bad)


def test_unreachable_bootstrap_is_one_line(capsys):
    code, out, err = tool(capsys, "127.0.0.1:1", "--list")
    assert (code, out) == (1, "")
    assert err.startswith("Error: no bootstrap server reachable (tried 127.0.0.1:1)") and err.count("\n") == 1


def test_verbose_views(bootstrap, topic, capsys):
    commit(bootstrap, "verbose", {(topic, 0): 1})
    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "verbose", "--members", "--verbose")
    assert (code, err) == (0, NO_MEMBERS.format("verbose"))
    assert out.splitlines()[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                                           "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "verbose", "--state", "--verbose")
    assert code == 0
    assert out.splitlines()[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                           "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert out.splitlines()[2].split()[3:] == ["-", "Empty", "-", "-", "0"]


def test_all_groups_and_share_groups_left_alone(broker, capsys):
    """Its own broker: --all-groups resets and deletes every consumer group, and no share group."""
    bootstrap = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({"all": (2, 1)})
        admin.alter_share_group_offsets("shared", {("all", 0): 0})  # a share group
    commit(bootstrap, "g1", {("all", 0): 0})
    commit(bootstrap, "g2", {("all", 1): 0})
    code, out, _ = tool(capsys, bootstrap, "--list")
    assert (code, out) == (0, "g1\ng2\n")
    code, out, err = tool(capsys, bootstrap, "--describe", "--group", "shared")
    assert (code, err) == (1, "Error: Consumer group 'shared' does not exist.\n")

    code, out, _ = tool(capsys, bootstrap, "--reset-offsets", "--all-groups", "--all-topics", "--to-latest",
                        "--execute", "--export")
    assert (code, out) == (0, "g1,all,0,0\ng2,all,1,0\n\n")
    code, out, _ = tool(capsys, bootstrap, "--reset-offsets", "--all-groups", "--all-topics", "--to-current",
                        "--dry-run")
    assert code == 0 and out.splitlines()[2:] == [reset_row("g1", "all", 0, 0), reset_row("g2", "all", 1, 0)]

    code, out, err = tool(capsys, bootstrap, "--delete", "--group", "shared")
    assert (code, err) == (1, "Error: Group 'shared' could not be deleted due to: Group 'shared' is not a consumer "
                              "group.\n")
    code, out, err = tool(capsys, bootstrap, "--delete", "--all-groups")
    assert (code, out, err) == (0, "Deletion of requested consumer groups ('g1', 'g2') was successful.\n", "")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert [(g.group_id, g.type) for g in admin.list_groups()] == [("shared", "share")]


def test_a_live_group_is_described_with_its_members_and_refuses_a_reset(bootstrap, topic, capsys):
    """A classic group with a member (confluent-kafka, range assignor): DescribeGroups gives the
    member, its host and client id, its partitions and the assignor; the offsets view names the
    owner of each partition; a reset is refused while the member is there."""
    commit(bootstrap, "live", {(topic, 0): 3})
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": "live", "client.id": "worker-1",
                       "partition.assignment.strategy": "range", "enable.auto.commit": False})
    member.subscribe([topic])
    try:
        deadline = 200
        while len(member.assignment()) < 2 and deadline:
            member.poll(0.05)
            deadline -= 1
        assert len(member.assignment()) == 2
        code, out, err = tool(capsys, bootstrap, "--describe", "--group", "live", "--members", "--verbose")
        assert code == 0 and err == ""
        [row] = out.splitlines()[2:]
        fields = row.split()
        assert fields[0] == "live" and fields[2] == "/127.0.0.1" and fields[3] == "worker-1" and fields[4] == "2"
        assert fields[5:] == ["-", f"{topic}(0,1)", "-", "-"]  # a classic member: no epochs, no target
        member_id = fields[1]

        code, out, err = tool(capsys, bootstrap, "--describe", "--group", "live", "--state")
        assert code == 0 and out.splitlines()[2].split()[3:] == ["range", "Stable", "1"]

        code, out, err = tool(capsys, bootstrap, "--describe", "--group", "live")
        assert code == 0 and err == ""
        rows = [line.split() for line in out.splitlines()[2:]]
        assert [r[:6] for r in rows] == [["live", topic, "0", "3", "10", "7"], ["live", topic, "1", "-", "10", "-"]]
        assert {r[6] for r in rows} == {member_id} and {r[8] for r in rows} == {"worker-1"}

        code, out, err = tool(capsys, bootstrap, "--reset-offsets", "--group", "live", "--topic", topic,
                              "--to-earliest", "--execute")
        assert code == 1 and "group 'live' is inactive, but the current state is Stable" in err
        assert out.strip() == RESET_HEADER  # no row: nothing reset
    finally:
        member.close()


def test_a_kip848_group_is_listed_as_consumer_and_described_with_epochs(bootstrap, topic, capsys):
    """A KIP-848 group (confluent-kafka, group.protocol=consumer): --list --type shows it as Consumer;
    the members view (ConsumerGroupDescribe) gives its member with the current and target epochs and
    assignments; --state --verbose the assignor, the group epoch and the target assignment epoch
    (ConsumerGroupCommand's columns); a reset is refused while the member is there."""
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": "modern", "client.id": "worker-9",
                       "group.protocol": "consumer", "enable.auto.commit": False})
    member.subscribe([topic])
    try:
        deadline = 200
        while len(member.assignment()) < 2 and deadline:
            member.poll(0.05)
            deadline -= 1
        assert len(member.assignment()) == 2
        code, out, err = tool(capsys, bootstrap, "--list", "--type", "--state")
        assert code == 0 and ["modern", "Consumer", "Stable"] in [line.split() for line in out.splitlines()]

        code, out, err = tool(capsys, bootstrap, "--describe", "--group", "modern", "--members", "--verbose")
        assert code == 0 and err == ""
        [row] = [line.split() for line in out.splitlines()[2:]]
        assert row[0] == "modern" and row[2:5] == ["/127.0.0.1", "worker-9", "2"]
        assert row[5:] == ["1", f"{topic}(0,1)", "1", f"{topic}(0,1)"]  # current epoch = target epoch

        code, out, err = tool(capsys, bootstrap, "--describe", "--group", "modern", "--state", "--verbose")
        assert code == 0 and out.splitlines()[2].split()[3:] == ["uniform", "Stable", "1", "1", "1"]

        code, out, err = tool(capsys, bootstrap, "--reset-offsets", "--group", "modern", "--topic", topic,
                              "--to-earliest", "--execute")
        assert code == 1 and "group 'modern' is inactive, but the current state is Stable" in err
    finally:
        member.close()
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        [listed] = [g for g in admin.list_groups() if g.group_id == "modern"]
    assert (listed.type, listed.state) == ("consumer", "Empty")  # left: the group stays, empty
