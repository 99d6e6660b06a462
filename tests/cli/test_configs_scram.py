"""`quafka configs --entity-type users`: SCRAM credentials as kafka-configs.sh adds, deletes and
describes them (Kafka's ConfigCommand), through AlterUserScramCredentials and
DescribeUserScramCredentials; the password never reaches the broker."""

from __future__ import annotations

from cli.helpers import cli


def test_add_describe_delete_scram_credentials(broker, capsys):
    bs = ["--bootstrap-server", broker.bootstrap_servers, "--entity-type", "users"]
    code, out, err = cli(capsys, "configs", *bs, "--entity-name", "alice", "--alter", "--add-config",
                         "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]")
    assert code == 0, err
    assert out.strip() == "Completed updating config for user alice."
    code, out, _ = cli(capsys, "configs", *bs, "--describe")
    assert out.strip() == ("SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
                           "SCRAM-SHA-512=iterations=4096")
    code, out, _ = cli(capsys, "configs", *bs, "--entity-name", "alice", "--alter", "--delete-config", "SCRAM-SHA-512")
    assert code == 0
    code, out, _ = cli(capsys, "configs", *bs, "--entity-name", "alice", "--describe")
    assert out.strip() == "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"
    stored = broker.server.state.metadata.scram_credential("alice", "SCRAM-SHA-256")
    assert stored is not None and b"alice-secret" not in stored.salt + stored.stored_key + stored.server_key


def test_refusals_carry_kafkas_errors(broker, capsys):
    bs = ["--bootstrap-server", broker.bootstrap_servers, "--entity-type", "users", "--entity-name", "bob", "--alter"]
    code, _, err = cli(capsys, "configs", *bs, "--delete-config", "SCRAM-SHA-512")
    assert code != 0 and "Attempt to delete a user credential that does not exist" in err
    code, _, err = cli(capsys, "configs", *bs, "--add-config", "SCRAM-SHA-256=[iterations=1000,password=x]")
    assert code != 0 and "Too few iterations" in err
    code, _, err = cli(capsys, "configs", *bs, "--add-config", "SCRAM-SHA-256=[iterations=8192]")
    assert code != 0 and "a password is required" in err
