"""`quafka acls` end to end against an embedded broker, as kafka-acls.sh (Kafka 4.x's
org.apache.kafka.tools.AclCommand): its options, its output lines, its argument checks; and the
Admin's create_acls / describe_acls / delete_acls behind it. The caller is User:ANONYMOUS, made a
super user (authentication is another part of issue 29)."""

from __future__ import annotations

import pytest

from quafka import EmbeddedBroker
from quafka.broker.config import STANDARD_AUTHORIZER
from quafka.client import AclBinding, AclBindingFilter, Admin, KafkaException

from cli.helpers import cli, run_quafka

ADMIN = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}


@pytest.fixture
def bs():
    with EmbeddedBroker(config=ADMIN) as broker:  # its own: the tests change the ACLs
        yield broker.bootstrap_servers


def acls_cli(capsys, bs, *args):
    return cli(capsys, "acls", "--bootstrap-server", bs, *args)


def test_add_list_and_remove_print_kafkas_lines(capsys, bs):
    code, out, err = acls_cli(capsys, bs, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                              "--operation", "describe", "--topic", "orders")
    assert (code, err) == (0, "")
    assert out == ("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"
                   " \t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
                   "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n")
    code, out, _ = acls_cli(capsys, bs, "--add", "--allow-principal", "User:alice", "--operation", "READ",
                            "--topic", "orders")
    assert (code, out) == (0, "Acl (pattern=ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL), "
                              "entry=(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)) already "
                              "exists.\n")
    assert acls_cli(capsys, bs, "--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9", "--topic", "pay-",
                    "--resource-pattern-type", "prefixed")[0] == 0
    code, out, _ = acls_cli(capsys, bs, "--list")
    assert (code, out) == (0,
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n"
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=pay-, patternType=PREFIXED)`:\n"
        "\t(principal=User:bob, host=10.0.0.9, operation=ALL, permissionType=DENY)\n\n")
    # --list --topic with MATCH: what applies to pay-eu (the prefix), not orders
    code, out, _ = acls_cli(capsys, bs, "--list", "--topic", "pay-eu", "--resource-pattern-type", "match")
    assert code == 0 and "name=pay-, patternType=PREFIXED" in out and "orders" not in out
    code, out, _ = acls_cli(capsys, bs, "--list", "--principal", "User:bob")
    assert out.startswith("ACLs for principal `User:bob`\nCurrent ACLs for resource `ResourcePattern("
                          "resourceType=TOPIC, name=pay-, patternType=PREFIXED)`") and "alice" not in out
    code, out, _ = acls_cli(capsys, bs, "--remove", "--allow-principal", "User:alice", "--operation", "Read",
                            "--topic", "orders", "--force")
    assert (code, out) == (0, "")
    code, out, _ = acls_cli(capsys, bs, "--list", "--topic", "orders")
    assert "operation=READ" not in out and "operation=DESCRIBE" in out
    # no principal: every ACL of the resource filter goes
    assert acls_cli(capsys, bs, "--remove", "--topic", "orders", "--force")[0] == 0
    assert "orders" not in acls_cli(capsys, bs, "--list")[1]


def test_remove_asks_first_and_keeps_the_acls_on_no(capsys, monkeypatch, bs):
    import io

    acls_cli(capsys, bs, "--add", "--allow-principal", "User:alice", "--topic", "t")
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, out, _ = acls_cli(capsys, bs, "--remove", "--topic", "t")
    assert code == 0 and out == ("Are you sure you want to delete all ACLs for resource filter `ResourcePatternFilter("
                                 "resourceType=TOPIC, name=t, patternType=LITERAL)`? (y/n)\n")
    assert "name=t," in acls_cli(capsys, bs, "--list")[1]
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert acls_cli(capsys, bs, "--remove", "--topic", "t")[0] == 0
    assert acls_cli(capsys, bs, "--list")[1] == ""


def test_producer_and_consumer_conveniences(capsys, bs):
    assert acls_cli(capsys, bs, "--add", "--allow-principal", "User:p", "--producer", "--topic", "t",
                    "--transactional-id", "tx", "--idempotent")[0] == 0
    assert acls_cli(capsys, bs, "--add", "--allow-principal", "User:c", "--consumer", "--topic", "t",
                    "--group", "g")[0] == 0
    with Admin({"bootstrap.servers": bs}) as admin:
        got = {(b.resource_type, b.name, b.principal, b.operation) for b in admin.describe_acls()}
    assert got == {("TOPIC", "t", "User:p", op) for op in ("WRITE", "DESCRIBE", "CREATE")} | {
        ("TRANSACTIONAL_ID", "tx", "User:p", op) for op in ("WRITE", "DESCRIBE")} | {
        ("CLUSTER", "kafka-cluster", "User:p", "IDEMPOTENT_WRITE"),
        ("TOPIC", "t", "User:c", "READ"), ("TOPIC", "t", "User:c", "DESCRIBE"), ("GROUP", "g", "User:c", "READ")}


@pytest.mark.parametrize(("args", "message"), [
    (["--topic", "t"], "Command must include exactly one action: --list, --add, --remove."),
    (["--add", "--list", "--topic", "t"], "exactly one action"),
    (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
    (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
    (["--add", "--allow-principal", "alice", "--topic", "t"], "principalType:principalName"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
     "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
    (["--add", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"],
     "ResourceType GROUP only supports operations"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Fly"], "Invalid operation 'Fly'"),
    (["--add", "--principal", "User:a", "--topic", "t"], "The --principal option is only available if --list is set"),
    (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "With --consumer you must specify"),
    (["--add", "--allow-principal", "User:a", "--producer"], "With --producer you must specify a --topic"),
    (["--add", "--allow-principal", "User:a", "--idempotent", "--topic", "t"], "--idempotent option is only"),
    (["--list", "--allow-principal", "User:a"], "can't be used with option \"--allow-principal\""),
    (["--add", "--producer", "--operation", "Read", "--allow-principal", "User:a", "--topic", "t"],
     "can't be used with option \"--operation\""),
    (["--list", "--resource-pattern-type", "fuzzy"], "Unknown resource-pattern-type: fuzzy"),
])
def test_bad_arguments_fail_with_one_line(capsys, args, message):
    code, out, err = cli(capsys, "acls", "--bootstrap-server", "127.0.0.1:1", *args)
    assert code == 1 and message in err and err.count("\n") == 1 and out == ""


def test_without_an_authorizer_the_tool_says_security_disabled(capsys):
    with EmbeddedBroker() as broker:
        code, out, err = cli(capsys, "acls", "--bootstrap-server", broker.bootstrap_servers, "--list")
    assert code == 1 and "SECURITY_DISABLED" in err and "No Authorizer is configured" in err


def test_admin_methods_and_a_subprocess_run(bs):
    with Admin({"bootstrap.servers": bs}) as admin:
        good = AclBinding("GROUP", "g", "PREFIXED", "User:alice", "*", "READ", "ALLOW")
        bad = AclBinding("CLUSTER", "nope", "LITERAL", "User:alice", "*", "ALTER", "ALLOW")
        results = admin.create_acls([good, bad])
        assert results[good] is None and isinstance(results[bad], KafkaException)
        assert "only valid name for the CLUSTER resource is kafka-cluster" in str(results[bad])
        assert admin.describe_acls(AclBindingFilter("GROUP", "g-1", "MATCH")) == [good]
        deleted = admin.delete_acls([AclBindingFilter(principal="User:alice"), AclBindingFilter("UNKNOWN")])
        assert deleted[AclBindingFilter(principal="User:alice")] == [good]
        assert isinstance(deleted[AclBindingFilter("UNKNOWN")], KafkaException)
    done = run_quafka("acls", "--bootstrap-server", bs, "--add", "--allow-principal", "User:x", "--cluster",
                      "--operation", "Alter")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Adding ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, "
                                  "patternType=LITERAL)`")


def test_alter_on_a_group_is_accepted_for_quafkas_in_flight_force_actions(capsys, bs):
    """quafka's extension: ALTER on a GROUP (QuafkaAlterInFlight asks it) can be granted, though
    kafka-acls.sh's AclCommand refuses it; other operations a group lacks stay refused."""
    code, out, err = acls_cli(capsys, bs, "--add", "--allow-principal", "User:ops", "--operation", "Alter",
                              "--group", "workers")
    assert (code, err) == (0, "")
    assert "(principal=User:ops, host=*, operation=ALTER, permissionType=ALLOW)" in out
    code, out, _ = acls_cli(capsys, bs, "--list", "--group", "workers")
    assert code == 0 and "operation=ALTER, permissionType=ALLOW" in out
    code, _out, err = acls_cli(capsys, bs, "--add", "--allow-principal", "User:ops", "--operation", "Write",
                               "--group", "workers")
    assert code == 1 and "ResourceType GROUP only supports operations" in err and "ALTER" in err
