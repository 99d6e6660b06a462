"""The pure SASL pieces: SCRAM (RFC 5802 / RFC 7677, Kafka's ScramSaslServer and ScramFormatter),
the JAAS parser (Kafka's JaasConfig) and SASL/PLAIN (PlainSaslServer), and the SCRAM credential
records and alteration rules (ScramControlManager, ScramImage)."""

from __future__ import annotations

import base64

import pytest

from quafka.broker.core.jaas import JaasError, PlainFailure, parse_jaas_config, plain_authenticate, server_login_module
from quafka.broker.core.metadata import ClusterMetadata, MetadataError
from quafka.broker.core.scram import ScramFailure, ScramServer, credential_from_password
from quafka.broker.core.scram_credentials import Deletion, Upsertion, describe, plan_alter

# RFC 7677 section 3: user "user", password "pencil"
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _server(users: dict[str, str], mechanism: str = "SCRAM-SHA-256") -> ScramServer:
    creds = {u: credential_from_password(mechanism, p, SALT, 4096) for u, p in users.items()}
    return ScramServer(mechanism, creds.get, SERVER_NONCE, b"k" * 32)


def test_rfc7677_exchange_gives_the_rfc_messages():
    server = _server({"user": "pencil"})
    assert server.evaluate(CLIENT_FIRST) == SERVER_FIRST
    assert server.evaluate(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.username == "user"


def test_wrong_password_and_unknown_user_fail_alike_at_the_proof():
    wrong = _server({"user": "not-pencil"})
    unknown = _server({"someone": "pencil"})
    first_wrong, first_unknown = wrong.evaluate(CLIENT_FIRST), unknown.evaluate(CLIENT_FIRST)
    # both answer a server-first message of the same shape (the unknown user's salt is derived, not refused)
    assert first_wrong.startswith(b"r=rOprNGfwEbeRWgbNEkqO%") and b",i=4096" in first_unknown
    logged = []
    for server in (wrong, unknown):
        with pytest.raises(ScramFailure) as info:
            server.evaluate(CLIENT_FINAL)
        assert server.state == ScramServer.FAILED
        logged.append(str(info.value))
    # for the broker's log only (the client is told Kafka's generic message): the user is named as a user
    assert logged == ["wrong password for user 'user' (invalid client proof)", "unknown user 'user'"]
    # the derived salt is stable per user (a retry cannot tell an unknown user by a changing salt)
    assert _server({}).evaluate(CLIENT_FIRST) == first_unknown


@pytest.mark.parametrize("token", [
    b"", b"garbage", b"n,,r=abc", b"p=tls-unique,,n=user,r=x", b"n,,n=us=ZZer,r=x", b"\xff\xfe",
    b"n,a=other,n=user,r=x",
])
def test_malformed_client_first_fails(token):
    with pytest.raises(ScramFailure):
        _server({"user": "pencil"}).evaluate(token)


@pytest.mark.parametrize("final", [
    CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # channel binding that does not repeat the gs2 header
    CLIENT_FINAL.replace(b"hNlF$k0,p", b"hNlF$k1,p"),  # another nonce
    CLIENT_FINAL.split(b",p=")[0],  # no proof
    CLIENT_FINAL[:-8] + b"!!!!!!!=",  # proof not base64
])
def test_bad_client_final_fails(final):
    server = _server({"user": "pencil"})
    server.evaluate(CLIENT_FIRST)
    with pytest.raises(ScramFailure):
        server.evaluate(final)


def test_credential_repr_hides_salt_and_keys():
    text = repr(credential_from_password("SCRAM-SHA-512", "pencil", SALT, 4096))
    assert "hidden" in text and base64.b64encode(SALT).decode() not in text and "4096" in text


def test_jaas_config_parses_plain_users():
    module = server_login_module('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                                 '  username="admin" password="admin-secret" user_admin="admin-secret" user_alice=a1;',
                                 "PLAIN")
    assert module.plain_users == {"admin": "admin-secret", "alice": "a1"}
    assert "admin-secret" not in repr(module)


@pytest.mark.parametrize("text", [
    'org.x.Module required user_a="s3cret"',  # no ';'
    'org.x.Module mandatory user_a="s3cret";',  # not a flag
    'org.x.Module required user_a="s3cret;',  # unclosed quote
    'org.x.Module required user_a;',
    'a required; b required;',
    '',
])
def test_bad_jaas_config_is_refused_without_the_secret(text):
    with pytest.raises(JaasError) as info:
        server_login_module(text)
    assert "s3cret" not in str(info.value)


def test_jaas_login_module_must_fit_the_mechanism():
    with pytest.raises(JaasError, match="PlainLoginModule"):
        server_login_module("org.apache.kafka.common.security.scram.ScramLoginModule required;", "PLAIN")
    assert len(parse_jaas_config("a required; b optional x=1;")) == 2


def test_plain_accepts_the_user_and_refuses_others_alike():
    users = {"alice": "alice-secret"}
    assert plain_authenticate(b"\x00alice\x00alice-secret", users) == "alice"
    assert plain_authenticate(b"alice\x00alice\x00alice-secret", users) == "alice"
    messages = set()
    logged = []
    for token in (b"\x00alice\x00wrong", b"\x00bob\x00alice-secret"):
        with pytest.raises(PlainFailure) as info:
            plain_authenticate(token, users)
        messages.add(info.value.client_message)
        logged.append(str(info.value))
        assert "alice-secret" not in str(info.value) and "wrong" not in str(info.value).replace("wrong password", "")
    # the log line names the user as a user (not "wrong password 'alice'", which reads as a password)
    assert logged == ["wrong password for user 'alice'", "unknown user 'bob'"]
    assert messages == {"Authentication failed: Invalid username or password"}
    with pytest.raises(PlainFailure) as info:
        plain_authenticate(b"only-two\x00parts", users)
    assert info.value.client_message is None  # Kafka's generic message


def test_scram_records_replay_and_snapshot_without_passwords():
    md = ClusterMetadata("c", 1)
    results, records = plan_alter(md, [], [Upsertion("alice", 1, 8192, b"salt", b"x" * 32)])
    assert results == [("alice", 0, None)]
    assert "password" not in str(records) and records[0]["iterations"] == 8192
    for r in records:
        md.replay(r)
    assert md.scram_credential("alice", "SCRAM-SHA-256").iterations == 8192
    again = ClusterMetadata("c", 1)
    for r in md.snapshot_records():
        again.replay(r)
    assert again.scram_credentials == md.scram_credentials
    assert describe(md, None) == [("alice", 0, None, [(1, 8192)])]
    results, records = plan_alter(md, [Deletion("alice", 1)], [])
    for r in records:
        md.replay(r)
    assert md.scram_credentials == {}


def test_bad_scram_record_error_names_no_secret():
    with pytest.raises(MetadataError) as info:
        ClusterMetadata("c", 1).replay({"type": "user_scram_credential", "user": "a", "mechanism": "SCRAM-SHA-256",
                                        "salt": "c2VjcmV0", "stored_key": "!!", "server_key": "c2VjcmV0",
                                        "iterations": 4096})
    assert "c2VjcmV0" not in str(info.value)


def test_alter_rules_follow_kafka():
    md = ClusterMetadata("c", 1)
    up = lambda name, mech=1, it=4096: Upsertion(name, mech, it, b"s", b"p" * 32)  # noqa: E731
    results, records = plan_alter(md, [Deletion("gone", 1), Deletion("", 1)],
                                  [up("twice"), up("twice", 2), up("few", it=4095), up("many", it=16385),
                                   up("mech", mech=3)])
    by_user = {u: (c, m) for u, c, m in results}
    assert by_user["gone"] == (91, "Attempt to delete a user credential that does not exist")
    assert by_user[""] == (93, "Username must not be empty")
    assert by_user["twice"] == (92, "A user credential cannot be altered twice in the same request")
    assert by_user["few"] == (93, "Too few iterations") and by_user["many"] == (93, "Too many iterations")
    assert by_user["mech"] == (33, "Unknown SCRAM mechanism")
    assert records == []
    assert describe(md, ["x", "x"]) == [("x", 92, "Cannot describe SCRAM credentials for the same user twice in a "
                                                   "single request: x", [])]
    assert describe(md, ["y"])[0][1:3] == (91, "Attempt to describe a user credential that does not exist: y")
