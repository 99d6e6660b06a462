"""`quafka share-groups` end to end against an embedded broker: Kafka 4.4's kafka-share-groups.sh
output formats and exit codes — list, describe views, --reset-offsets (--to-datetime, --dry-run vs
--execute, --export/--from-file, the refusal for a group with members), --delete-offsets, --delete."""

import datetime

import pytest

from support import produce_batch, set_group_configs, wait_until

from cli.helpers import cli, run_quafka

from quafka.cli.main import main
from quafka.client import Admin, ShareConsumer

T_OLD = 1_700_000_000_000          # partition 0: offsets 0-4; partition 1: offsets 0-9
T_NEW = T_OLD + 600_000            # partition 0: offsets 5-9


def table(out):
    """Kafka's tables: a blank line, then whitespace-separated columns."""
    assert out.startswith("\n"), repr(out)
    return [line.split() for line in out.strip("\n").splitlines()]


def kafka_datetime(ms, zone=datetime.timezone.utc):
    moment = datetime.datetime.fromtimestamp(ms / 1000, zone)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    return text if zone is datetime.timezone.utc else text + moment.strftime("%z")[:3] + ":" + moment.strftime("%z")[3:]


@pytest.fixture
def jobs(broker):
    bs = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topics({"jobs": (2, 1)})
    produce_batch(bs, "jobs", 5, partition=0, timestamp_ms=T_OLD)
    produce_batch(bs, "jobs", 5, partition=0, timestamp_ms=T_NEW)
    produce_batch(bs, "jobs", 10, partition=1, timestamp_ms=T_OLD)
    return bs


def test_reset_offsets_dry_run_execute_datetime_export_from_file(jobs, capsys, tmp_path):
    bs = ["--bootstrap-server", jobs]
    reset = ["share-groups", *bs, "--reset-offsets", "--group", "g"]

    # a group that does not exist yet: --dry-run shows the plan and creates nothing
    code, out, err = cli(capsys, *reset, "--topic", "jobs", "--to-latest", "--dry-run")
    assert code == 0 and table(out) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                        ["g", "jobs", "0", "10"], ["g", "jobs", "1", "10"]]
    assert out.splitlines()[1] == "GROUP           TOPIC           PARTITION  NEW-OFFSET"  # Kafka's widths
    code, out, err = cli(capsys, "share-groups", *bs, "--describe", "--group", "g")
    assert (code, out, err) == (1, "", "Error: Share group 'g' does not exist.\n")

    # --execute creates the group with those start offsets
    assert cli(capsys, *reset, "--topic", "jobs", "--to-latest", "--execute")[0] == 0
    code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "g")
    assert code == 0 and table(out) == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                                        ["g", "jobs", "0", "10", "0"], ["g", "jobs", "1", "10", "0"]]
    code, out, _ = cli(capsys, "share-groups", *bs, "--list")
    assert (code, out) == (0, "g\n")

    # --to-datetime (UTC when no zone; the same instant with a zone gives the same plan); partition 1
    # has nothing at or after T_NEW, so it falls back to the log end with Kafka's warning
    expected = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], ["g", "jobs", "0", "5"], ["g", "jobs", "1", "10"]]
    code, out, err = cli(capsys, *reset, "--all-topics", "--to-datetime", kafka_datetime(T_NEW), "--dry-run")
    assert code == 0 and table(out) == expected
    assert err == "Warn: Partition 1 from topic jobs is empty. Falling back to latest known offset.\n"
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    code, out, _ = cli(capsys, *reset, "--topic", "jobs:0,1", "--to-datetime", kafka_datetime(T_NEW, plus2),
                       "--dry-run")
    assert code == 0 and table(out) == expected
    code, out, _ = cli(capsys, *reset, "--topic", "jobs:0", "--to-datetime", kafka_datetime(T_OLD + 1), "--dry-run")
    assert table(out)[1] == ["g", "jobs", "0", "5"]
    # the dry runs changed nothing
    code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "g", "--offsets")
    assert [row[3] for row in table(out)[1:]] == ["10", "10"]

    code, out, _ = cli(capsys, *reset, "--all-topics", "--to-datetime", kafka_datetime(T_NEW), "--execute")
    assert code == 0 and table(out) == expected
    code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "g", "--verbose")
    assert table(out) == [["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"],
                          ["g", "jobs", "0", "-", "5", "5"], ["g", "jobs", "1", "-", "10", "0"]]

    # --export: CSV that --from-file reads back (and --to-current plans the current offsets)
    code, out, _ = cli(capsys, *reset, "--all-topics", "--to-current", "--dry-run", "--export")
    assert (code, out) == (0, "jobs,0,5\njobs,1,10\n\n")
    code, out, _ = cli(capsys, *reset, "--topic", "jobs", "--to-earliest", "--dry-run", "--export")
    assert (code, out) == (0, "jobs,0,0\njobs,1,0\n\n")
    plan = tmp_path / "plan.csv"
    plan.write_text(out)
    code, out, _ = cli(capsys, *reset, "--from-file", str(plan), "--execute")
    assert code == 0 and table(out)[1:] == [["g", "jobs", "0", "0"], ["g", "jobs", "1", "0"]]
    code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "g")
    assert table(out)[1:] == [["g", "jobs", "0", "0", "10"], ["g", "jobs", "1", "0", "10"]]

    # the group,topic,partition,offset form; offsets outside the log are clamped with a warning
    plan.write_text("other,jobs,0,1\ng,jobs,1,99\n")
    code, out, err = cli(capsys, *reset, "--from-file", str(plan), "--execute")
    assert code == 0 and table(out)[1:] == [["g", "jobs", "1", "10"]]
    assert err == ("Warning: New offset (99) is higher than latest offset for topic partition jobs-1. "
                   "Value will be set to 10.\n")
    code, out, _ = cli(capsys, *reset, "--topic", "jobs:0", "--to-offset", "3", "--execute", "--export")
    assert out == "jobs,0,3\n\n"
    code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "g")
    assert table(out)[1:] == [["g", "jobs", "0", "3", "7"], ["g", "jobs", "1", "10", "0"]]

    # option and input errors: one line, exit code 1
    for args, message in [
        (("--topic", "jobs", "--to-earliest"), "Error: Option --reset-offsets takes the option: --execute or --dry-run\n"),
        (("--to-earliest", "--dry-run"),
         "Error: Option --reset-offsets takes one of these options: --all-topics, --from-file, --topic\n"),
        (("--topic", "jobs", "--to-earliest", "--to-latest", "--dry-run"),
         "Error: Option --to-earliest can't be used with option --to-latest\n"),
        (("--topic", "jobs:7", "--to-earliest", "--dry-run"), 'Error: The partitions "jobs-7" do not exist\n'),
        (("--topic", "jobs", "--to-datetime", "2024-01-01 10:00:00", "--dry-run"),
         "Error: Error parsing timestamp. It does not contain a 'T' according to ISO8601 format\n"),
    ]:
        assert cli(capsys, *reset, *args) == (1, "", message)
    code, _, err = cli(capsys, *reset, "--topic", "jobs", "--to-datetime", "2024-01-01T10:00:00", "--dry-run")
    assert code == 1 and err.startswith('Error: Unparseable date: "2024-01-01T10:00:00"') and err.count("\n") == 1

    # --delete-offsets, then --delete
    code, out, _ = cli(capsys, "share-groups", *bs, "--delete-offsets", "--group", "g", "--topic", "jobs")
    assert code == 0 and table(out) == [["TOPIC", "STATUS"], ["jobs", "Successful"]]
    code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "g")
    assert (code, out) == (0, "\nShare group 'g' has no offset information.\n")
    code, out, err = cli(capsys, "share-groups", *bs, "--delete", "--group", "g")
    assert (code, out, err) == (0, "Deletion of requested share groups ('g') was successful.\n", "")
    code, out, err = cli(capsys, "share-groups", *bs, "--delete", "--group", "g")
    # deleted twice: the group does not exist (Kafka's tool says "is not a share group"; issue 15)
    assert (code, out) == (1, "") and err == "Error: Group 'g' could not be deleted due to: Share group 'g' does not exist.\n"
    assert cli(capsys, "share-groups", *bs, "--list") == (0, "", "")


def test_reset_refused_while_a_consumer_is_in_the_group(jobs, capsys):
    bs = ["--bootstrap-server", jobs]
    set_group_configs(jobs, "busy", {"share.auto.offset.reset": "earliest", "share.assignment.interval.ms": "0"})
    consumer = ShareConsumer({"bootstrap.servers": jobs, "group.id": "busy", "client.id": "cli-test"})
    try:
        consumer.subscribe(["jobs"])
        received = []
        wait_until(lambda: received.extend(consumer.poll(0.2)) or len(received) == 20, 10, message="20 records")

        # the member is visible in --members and --state
        code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "busy", "--members", "--verbose")
        rows = table(out)
        assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]
        assert len(rows) == 2 and rows[1][0] == "busy" and rows[1][1] == consumer.member_id
        assert rows[1][3:5] == ["cli-test", "2"] and rows[1][6] == "jobs:0,1"
        code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "busy", "--state")
        rows = table(out)
        assert rows[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
        assert rows[1][0] == "busy" and rows[1][1] == jobs and rows[1][3:] == ["Stable", "1"]
        code, out, _ = cli(capsys, "share-groups", *bs, "--list", "--state", "stable")
        assert out.splitlines() == ["GROUP           STATE", "busy            Stable"]

        # a real subprocess: the refusal is one line on stderr and exit code 1, nothing changed
        before = cli(capsys, "share-groups", *bs, "--describe", "--group", "busy")[1]
        done = run_quafka("share-groups", *bs, "--reset-offsets", "--group", "busy", "--topic", "jobs",
                          "--to-earliest", "--execute")
        assert (done.returncode, done.stdout, done.stderr) == (1, "", "Error: Share group 'busy' is not empty.\n")
        assert cli(capsys, "share-groups", *bs, "--describe", "--group", "busy")[1] == before
        code, out, err = cli(capsys, "share-groups", *bs, "--delete", "--group", "busy")
        assert (code, err) == (1, "Error: Group 'busy' could not be deleted due to: Share group 'busy' is not EMPTY.\n")
    finally:
        consumer.close()

    code, out, err = cli(capsys, "share-groups", *bs, "--describe", "--group", "busy", "--members")
    assert (code, out, err) == (0, "", "\nShare group 'busy' has no active members.\n")
    code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "busy", "--state", "--verbose")
    rows = table(out)
    assert rows[0][-3:] == ["GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"] and rows[1][3] == "Empty"
    # once the consumer has left, the same reset works
    done = run_quafka("share-groups", *bs, "--reset-offsets", "--group", "busy", "--topic", "jobs",
                      "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    assert table(done.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                  ["busy", "jobs", "0", "0"], ["busy", "jobs", "1", "0"]]


def test_share_groups_subprocess_dry_run_vs_execute_and_errors(jobs, tmp_path, capsys):
    bs = ["--bootstrap-server", jobs]
    reset = ["share-groups", *bs, "--reset-offsets", "--group", "sub", "--topic", "jobs"]
    done = run_quafka(*reset, "--to-offset", "4", "--execute")
    assert done.returncode == 0, done.stderr
    done = run_quafka(*reset, "--to-datetime", kafka_datetime(T_NEW) + "Z", "--dry-run", "--export")
    assert (done.returncode, done.stdout) == (0, "jobs,0,5\njobs,1,10\n\n")
    plan = tmp_path / "plan.csv"
    plan.write_text(done.stdout)
    code, out, _ = cli(capsys, "share-groups", *bs, "--describe", "--group", "sub")
    assert table(out)[1:] == [["sub", "jobs", "0", "4", "6"], ["sub", "jobs", "1", "4", "6"]]
    done = run_quafka("share-groups", *bs, "--reset-offsets", "--group", "sub", "--from-file", str(plan), "--execute")
    assert done.returncode == 0 and table(done.stdout)[1:] == [["sub", "jobs", "0", "5"], ["sub", "jobs", "1", "10"]]
    done = run_quafka("share-groups", *bs, "--describe", "--group", "sub", "--offsets")
    assert table(done.stdout)[1:] == [["sub", "jobs", "0", "5", "5"], ["sub", "jobs", "1", "10", "0"]]

    # errors: one line on stderr, exit code 1 (in-process: the subprocess path is the same code)
    assert cli(capsys, "share-groups", *bs, "--describe", "--group", "ghost") == (
        1, "", "Error: Share group 'ghost' does not exist.\n")
    assert cli(capsys, "share-groups", *bs, "--delete-offsets", "--group", "ghost", "--topic", "jobs") == (
        1, "", "Error: Share group 'ghost' does not exist.\n")
    assert cli(capsys, "share-groups", *bs, "--list", "--describe") == (
        1, "", "Error: Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
               "--delete-offsets.\n")
    assert cli(capsys, "share-groups", *bs, "--list", "--state", "Busy") == (
        1, "", "Error: Invalid state list 'Busy'. Valid states are: Empty, Stable, Dead\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["share-groups", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "examples:" in out and "--reset-offsets" in out
