"""Issue 29: no password, SCRAM salt or key ever in a log line or an error message. A broker with
every security protocol (tests/support/secure_broker.py) logs at DEBUG — every quafka logger, the
request log included — while clients log in with PLAIN and SCRAM, guess wrong passwords, and an
administrator reads the broker's configs and the users' SCRAM credentials. Then none of the
passwords, the SCRAM salts, StoredKeys and ServerKeys (in base64, hex or raw form), nor the TLS key,
appear in the captured log or in what DescribeConfigs answers."""

from __future__ import annotations

import base64
import logging
import re

import pytest

from quafka.client import Admin, AuthenticationException
from support.secure_broker import PLAIN_PASSWORD, SCRAM_PASSWORD, SCRAM_USER, client_config, secure_broker

GUESSED = "guessed-Pa55-7f3a"


def _forms(secret: bytes) -> list[str]:
    return [base64.b64encode(secret).decode(), secret.hex(), secret.decode("latin-1")]


def test_no_password_salt_or_key_reaches_a_log_line_or_a_described_config(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="quafka")
    with secure_broker(tmp_path) as broker:
        for protocol, mechanism in (("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"),
                                    ("SASL_PLAINTEXT", "SCRAM-SHA-512")):
            with Admin(client_config(broker, protocol, mechanism)) as admin:
                assert admin.list_topics() is not None
            for user in (SCRAM_USER, "nobody"):
                bad = client_config(broker, protocol, mechanism, **{"sasl.username": user, "sasl.password": GUESSED})
                with pytest.raises(AuthenticationException) as refused:
                    with Admin(bad) as admin:
                        admin.list_topics()
                assert GUESSED not in str(refused.value)
        with Admin({"bootstrap.servers": broker.listener_address("PLAINTEXT")}) as admin:
            described = admin.describe_configs("broker", str(broker.server.state.node_id))
        assert described.get("sasl.jaas.config") is None  # a password-type key is never shown (sensitive)
        credentials = broker.call(lambda: {m: c for m, c in broker.server.state.metadata.scram_credentials[
            SCRAM_USER].items()})
        key_pem = (tmp_path / "broker.pem").read_text()
    secrets = [PLAIN_PASSWORD, SCRAM_PASSWORD, GUESSED]
    for credential in credentials.values():
        for value in (credential.salt, credential.stored_key, credential.server_key):
            secrets += _forms(value)
    key_body = re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----(.*?)-----END", key_pem, re.S).group(1).split()
    secrets += [line for line in key_body if len(line) > 20]
    assert len(credentials) == 2 and len(caplog.records) > 50
    logged = caplog.text + "\n".join(repr(r.args) for r in caplog.records)
    described_text = repr(described)
    for secret in secrets:
        assert secret not in logged, "a secret reached the log"
        assert secret not in described_text, "a secret reached DescribeConfigs"
    # what the log does say: who failed, how
    assert "nobody" in caplog.text and SCRAM_USER in caplog.text
