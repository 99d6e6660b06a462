"""The tools' --command-config with security settings, against a broker with SASL_SSL and
SASL_PLAINTEXT listeners: a Java client properties file (sasl.jaas.config, ssl.truststore.*)
works unchanged for topics, configs, share-groups, consumer-groups, console-producer,
console-share-consumer and the perf tools; a wrong password is one line of error and exit code 1
at once, without the password."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.secure_broker import SCRAM_PASSWORD, SCRAM_USER, secure_broker

from quafka.cli.main import main


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with secure_broker(tmp_path_factory.mktemp("tls")) as broker:
        yield broker


def _java_properties(path, broker, password: str = SCRAM_PASSWORD, protocol: str = "SASL_SSL") -> str:
    """A Java client's security properties: the JAAS entry and a PEM trust store."""
    path.write_text(
        f"security.protocol={protocol}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{SCRAM_USER}" password="{password}";\n'
        + (f"ssl.truststore.location={broker.ca_file}\nssl.truststore.type=PEM\n" if protocol.endswith("SSL") else ""))
    return str(path)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_admin_tools_take_the_security_settings_of_command_config(secure, tmp_path, capsys):
    bootstrap = secure.listener_address("SASL_SSL")
    props = _java_properties(tmp_path / "client.properties", secure)
    common = ("--bootstrap-server", bootstrap, "--command-config", props)
    assert _cli(capsys, "topics", *common, "--create", "--topic", "secured", "--partitions", "2")[0] == 0
    code, out, err = _cli(capsys, "topics", *common, "--list")
    assert (code, "secured" in out.split()) == (0, True), err
    code, out, err = _cli(capsys, "topics", *common, "--describe", "--topic", "secured")
    assert code == 0 and "PartitionCount: 2" in out, err
    code, out, err = _cli(capsys, "configs", *common, "--alter", "--entity-type", "groups", "--entity-name", "sg",
                          "--add-config", "share.auto.offset.reset=earliest")
    assert code == 0, err
    code, out, err = _cli(capsys, "configs", *common, "--describe", "--entity-type", "groups", "--entity-name", "sg")
    assert code == 0 and "share.auto.offset.reset=earliest" in out, err
    assert _cli(capsys, "share-groups", *common, "--list")[0] == 0
    assert _cli(capsys, "consumer-groups", *common, "--list")[0] == 0
    # without the settings the SASL_SSL listener is not reachable: the settings are what made it work
    code, out, err = _cli(capsys, "topics", "--bootstrap-server", bootstrap, "--list")
    assert code == 1 and err.startswith("Error: "), err


def test_producing_and_consuming_tools_over_sasl_ssl(secure, tmp_path, capsys):
    bootstrap = secure.listener_address("SASL_SSL")
    props = _java_properties(tmp_path / "client.properties", secure)
    assert _cli(capsys, "topics", "--bootstrap-server", bootstrap, "--command-config", props, "--create",
                "--topic", "lines")[0] == 0
    assert _cli(capsys, "configs", "--bootstrap-server", bootstrap, "--command-config", props, "--alter",
                "--entity-type", "groups", "--entity-name", "lines-g", "--add-config",
                "share.auto.offset.reset=earliest")[0] == 0
    produced = subprocess.run([sys.executable, "-m", "quafka", "console-producer", "--bootstrap-server", bootstrap,
                               "--topic", "lines", "--command-config", props], input="one\ntwo\nthree\n",
                              capture_output=True, text=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    code, out, err = _cli(capsys, "console-share-consumer", "--bootstrap-server", bootstrap, "--topic", "lines",
                          "--group", "lines-g", "--command-config", props, "--max-messages", "3")
    assert (code, sorted(out.split())) == (0, ["one", "three", "two"]), err
    code, out, err = _cli(capsys, "perf", "producer", "--bootstrap-server", bootstrap, "--topic", "lines",
                          "--num-records", "50", "--record-size", "10", "--throughput", "-1",
                          "--producer.config", props)
    assert code == 0 and "50 records sent" in out, err
    code, out, err = _cli(capsys, "perf", "share-consumer", "--bootstrap-server", bootstrap, "--topic", "lines",
                          "--group", "lines-g", "--messages", "50", "--command-config", props, "--timeout", "20000")
    assert code == 0, err
    code, out, err = _cli(capsys, "perf", "consumer", "--bootstrap-server", bootstrap, "--topic", "lines",
                          "--num-records", "53", "--command-config", props, "--timeout", "20000")
    assert code == 0, err


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_a_wrong_password_is_one_line_and_exit_code_1_at_once(secure, tmp_path, protocol):
    """A subprocess: stderr is what a user sees (no log line besides the tool's own error)."""
    import time

    props = _java_properties(tmp_path / "wrong.properties", secure, password="Wr0ng-guess", protocol=protocol)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "quafka", "topics", "--bootstrap-server",
                           secure.listener_address(protocol), "--command-config", props, "--list"],
                          capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 10  # the interpreter's start included
    assert proc.returncode == 1 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("Error: SASL SCRAM-SHA-512 authentication of user 'bob'") and "Wr0ng-guess" not in line


def test_ignored_security_keys_are_warned_about_once_per_tool_run(secure, tmp_path):
    """sasl.* keys under security.protocol=PLAINTEXT are ignored as Kafka ignores them, with one
    warning: the tool opens more than one client from the same config (its probe and its own
    client), and the warning is printed once, naming which protocols the keys are for."""
    props = tmp_path / "plain.properties"
    props.write_text("security.protocol=PLAINTEXT\nsasl.mechanism=PLAIN\nssl.ca.location=/nowhere/ca.pem\n")
    assert main(["topics", "--bootstrap-server", secure.listener_address("PLAINTEXT"), "--create", "--topic",
                 "warn-once"]) == 0
    proc = subprocess.run([sys.executable, "-m", "quafka", "console-share-consumer", "--bootstrap-server",
                           secure.listener_address("PLAINTEXT"), "--topic", "warn-once", "--group", "warn-once",
                           "--command-config", str(props), "--timeout-ms", "500"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "ignoring" in line]
    assert warnings == ["security.protocol=PLAINTEXT: ignoring ssl.ca.location (SSL and SASL_SSL only); "
                        "sasl.mechanism (SASL_PLAINTEXT and SASL_SSL only)"], proc.stderr
