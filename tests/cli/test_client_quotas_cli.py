"""`quafka configs --entity-type users|clients` end to end against an embedded broker: the client
quotas kafka-configs.sh alters and describes, with Kafka's ConfigCommand output and messages
(alterConfig for users/clients, alterQuotaConfigs, describeQuotaConfigs)."""

from quafka.client import Admin

from cli.helpers import cli

ALICE = (("user", "alice"),)
ALICE_APP = (("client-id", "app"), ("user", "alice"))


def test_alter_and_describe_user_client_and_default_quotas(bootstrap, capsys, tmp_path):
    command_config = tmp_path / "admin.properties"
    command_config.write_text("client.id=quota-admin\nrequest.timeout.ms=20000\n")
    bs = ["--bootstrap-server", bootstrap, "--command-config", str(command_config)]
    alice = ["--entity-type", "users", "--entity-name", "alice"]

    code, out, err = cli(capsys, "configs", *bs, *alice, "--alter", "--add-config",
                         "producer_byte_rate=1048576,consumer_byte_rate=20971520,request_percentage=50")
    assert (code, out, err) == (0, "Completed updating config for user alice.\n", "")
    # a user's client id: two entity types, each paired with the name that follows it
    code, out, _ = cli(capsys, "configs", *bs, *alice, "--entity-type", "clients", "--entity-name", "app",
                       "--alter", "--add-config", "producer_byte_rate=1024")
    assert (code, out) == (0, "Completed updating config for user alice.\n")
    code, out, _ = cli(capsys, "configs", *bs, "--entity-type", "clients", "--entity-default", "--alter",
                       "--add-config", "consumer_byte_rate=4096")
    assert (code, out) == (0, "Completed updating default config for clients in the cluster.\n")
    code, out, _ = cli(capsys, "configs", *bs, "--client", "app", "--alter", "--add-config", "controller_mutation_rate=2.5")
    assert (code, out) == (0, "Completed updating config for client app.\n")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert admin.describe_client_quotas([("user", "alice")], strict=True) == {ALICE: {
            "producer_byte_rate": 1048576.0, "consumer_byte_rate": 20971520.0, "request_percentage": 50.0}}
        assert admin.describe_client_quotas([("user", "alice"), ("client-id", "app")]) == {
            ALICE_APP: {"producer_byte_rate": 1024.0}}

    # values print as Java's Double.toString (2.097152E7), keys sorted
    code, out, _ = cli(capsys, "configs", *bs, *alice, "--describe")
    assert (code, out) == (0, "Quota configs for user-principal 'alice' are consumer_byte_rate=2.097152E7, "
                              "producer_byte_rate=1048576.0, request_percentage=50.0\n")
    code, out, _ = cli(capsys, "configs", *bs, *alice, "--entity-type", "clients", "--entity-name", "app", "--describe")
    assert out == "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0\n"
    # every client id entity (no user part), the default one first
    code, out, _ = cli(capsys, "configs", *bs, "--entity-type", "clients", "--describe")
    assert out.splitlines() == ["Quota configs for the default client-id are consumer_byte_rate=4096.0",
                                "Quota configs for client-id 'app' are controller_mutation_rate=2.5"]
    code, out, _ = cli(capsys, "configs", *bs, "--client-defaults", "--describe")
    assert out == "Quota configs for the default client-id are consumer_byte_rate=4096.0\n"

    code, out, _ = cli(capsys, "configs", *bs, *alice, "--alter", "--delete-config", "request_percentage,consumer_byte_rate")
    assert (code, out) == (0, "Completed updating config for user alice.\n")
    code, out, _ = cli(capsys, "configs", *bs, "--user", "alice", "--describe")
    assert out == "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0\n"
    code, out, _ = cli(capsys, "configs", *bs, "--entity-type", "clients", "--entity-default", "--alter",
                       "--delete-config", "consumer_byte_rate")
    assert code == 0
    assert cli(capsys, "configs", *bs, "--client-defaults", "--describe") == (0, "", "")


def test_quota_alter_refusals_are_kafkas(bootstrap, capsys):
    bs = ["--bootstrap-server", bootstrap]
    bob = ["--entity-type", "users", "--entity-name", "bob"]

    def error(*args):
        code, out, err = cli(capsys, "configs", *bs, *args)
        assert code == 1 and out == "" and err.count("\n") == 1 and err.startswith("Error: ")
        return err[len("Error: "):-1]

    assert error(*bob, "--alter", "--delete-config", "producer_byte_rate") == "Invalid config(s): producer_byte_rate"
    assert error(*bob, "--alter", "--add-config", "producer_byte_rate=fast") == (
        "Cannot parse quota configuration value for producer_byte_rate: fast")
    assert error(*bob, "--alter", "--add-config", "retention.ms=1") == (
        "Only quota and SCRAM credential configs can be added for 'users' using --bootstrap-server. "
        "Unexpected config names: retention.ms")
    # the config names choose the API; one --alter may not change both quotas and SCRAM credentials
    assert error(*bob, "--alter", "--add-config", "SCRAM-SHA-256=[password=secret],consumer_byte_rate=5") == (
        "Cannot alter both quota and SCRAM credential configs simultaneously for 'users' using --bootstrap-server.")
    assert error("--user-defaults", "--alter", "--add-config", "SCRAM-SHA-512=[password=secret]") == (
        "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials using "
        "--bootstrap-server.")
    assert error("--entity-type", "clients", "--entity-name", "app", "--alter", "--add-config",
                 "SCRAM-SHA-256=[password=x],acks=1") == (
        "Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected config names: "
        "SCRAM-SHA-256,acks")
    assert error(*bob, "--alter", "--add-config", "producer_byte_rate=0") == (
        "Quota producer_byte_rate must be greater than 0: INVALID_REQUEST (error code 42)")
    assert error(*bob, "--entity-type", "clients", "--alter", "--add-config", "producer_byte_rate=1") == (
        "An entity name must be specified for every entity type")
    assert error("--entity-type", "users", "--entity-type", "topics", "--describe") == (
        "Only 'users' and 'clients' entity types may be specified together")
    assert error(*bob, "--entity-type", "users", "--describe") == "Duplicate entity type(s) specified: users"
    assert error(*bob, "--client", "app", "--describe") == (
        "--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    with Admin({"bootstrap.servers": bootstrap}) as admin:  # nothing was written for bob
        assert admin.describe_client_quotas([("user", "bob")]) == {}
