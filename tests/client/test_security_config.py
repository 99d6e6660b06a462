"""The client's security settings without a broker: the SCRAM client math (RFC 7677's test vector
and a broker that fails to prove itself), the config keys in librdkafka's and the Java client's
spellings, the refusals (GSSAPI, OAUTHBEARER, JKS, ...), secrets kept out of messages and reprs,
the TLS context built from files, inline PEM and PKCS#12, and the translation of Java names for
the confluent-kafka tools."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import ssl

import pytest
import trustme

from quafka.client import Admin, AsyncShareConsumer, ConfigException, PartitionReader
from quafka.client._scram_client import ScramClient, ScramError
from quafka.client._security import librdkafka_security_config, parse_jaas_config, security_settings
from quafka.client._ssl_context import build_ssl_context

SECRET = "s3cr3t-Pa55"
BASE = {"bootstrap.servers": "127.0.0.1:1"}

# RFC 7677 section 3: the SCRAM-SHA-256 exchange of user "user", password "pencil"
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


# ----------------------------------------------------------------------------- SCRAM client

def test_scram_sha_256_matches_rfc_7677():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", RFC_NONCE)
    assert client.first_message() == b"n,,n=user,r=" + RFC_NONCE.encode()
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify_server_final(RFC_SERVER_FINAL)
    assert client.complete


def _server_final_512(password: str, salt: bytes, client_first_bare: str, server_first: str,
                      client_final_without_proof: str) -> bytes:
    """A SCRAM-SHA-512 server's signature computed independently of the client module."""
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)
    server_key = hmac.new(salted, b"Server Key", "sha512").digest()
    auth = f"{client_first_bare},{server_first},{client_final_without_proof}".encode()
    return b"v=" + base64.b64encode(hmac.new(server_key, auth, "sha512").digest())


def test_scram_sha_512_round_trip_and_an_escaped_user_name():
    client = ScramClient("SCRAM-SHA-512", "a=b,c", "pw", "abc")
    assert client.first_message() == b"n,,n=a=3Db=2Cc,r=abc"
    salt = b"0123456789abcdef"
    server_first = f"r=abcXYZ,s={base64.b64encode(salt).decode()},i=4096"
    final = client.final_message(server_first.encode()).decode()
    without_proof = final.rsplit(",p=", 1)[0]
    assert without_proof == "c=biws,r=abcXYZ"
    client.verify_server_final(_server_final_512("pw", salt, "n=a=3Db=2Cc,r=abc", server_first, without_proof))
    assert client.complete


def test_a_server_that_does_not_know_the_credentials_is_refused():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", RFC_NONCE)
    client.first_message()
    client.final_message(RFC_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(ScramError, match="signature is wrong"):
        client.verify_server_final(forged)
    assert not client.complete


@pytest.mark.parametrize("server_first, error", [
    (b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
    (b"r=" + RFC_NONCE.encode() + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
    (b"r=" + RFC_NONCE.encode() + b"x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", "fewer than the minimum 4096"),
    (b"r=" + RFC_NONCE.encode() + b"x,s=***,i=4096", "not base64"),
    (b"e=unknown-user", "refused the SCRAM exchange: unknown-user"),
    (b"garbage", "malformed"),
])
def test_a_bad_server_first_message_is_refused(server_first, error):
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", RFC_NONCE)
    client.first_message()
    with pytest.raises(ScramError, match=error) as info:
        client.final_message(server_first)
    assert "pencil" not in str(info.value)


# ----------------------------------------------------------------------------- config keys

def test_plaintext_is_the_default_and_protocols_are_case_insensitive():
    assert security_settings({}).protocol == "PLAINTEXT"
    settings = security_settings({"security.protocol": "sasl_plaintext", "sasl.mechanism": "scram-sha-512",
                                  "sasl.username": "alice", "sasl.password": SECRET})
    assert (settings.protocol, settings.tls, settings.sasl.mechanism, settings.sasl.username) == \
        ("SASL_PLAINTEXT", None, "SCRAM-SHA-512", "alice")


def test_librdkafka_and_java_spellings_resolve_alike(tmp_path):
    librdkafka = security_settings({"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
                                    "sasl.username": "alice", "sasl.password": SECRET,
                                    "ssl.ca.location": "/ca.pem"})
    java = security_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                              "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM",
                              "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                  f'required username="alice" password="{SECRET}";'})
    assert librdkafka == java
    assert java.tls.ca_location == "/ca.pem" and java.tls.check_hostname and java.sasl.password == SECRET


def test_the_jaas_entry_takes_quoted_escaped_and_bare_values():
    assert parse_jaas_config('org.apache.kafka.common.security.scram.ScramLoginModule required\n'
                             '  username=bob password="a \\"quoted\\" ;pass";') == ("bob", 'a "quoted" ;pass')


@pytest.mark.parametrize("config, key, words", [
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanisms", "GSSAPI (Kafka's default"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism", "Kerberos"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism", "OAuth"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "DIGEST-MD5"}, "sasl.mechanisms", "PLAIN, SCRAM"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256",
      "sasl.username": "a", "sasl.password": SECRET}, "sasl.mechanism", "disagree"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "a"},
     "sasl.password", "needs sasl.username and sasl.password"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": SECRET,
      "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" '
                          f'password="{SECRET}";'}, "sasl.jaas.config", "not both"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'com.sun.security.auth.module.Krb5LoginModule required password="{SECRET}";'},
     "sasl.jaas.config", "Krb5LoginModule is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required username="a" '
                          f'password="{SECRET}" tokenauth="true";'}, "sasl.jaas.config", "delegation tokens"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" '
                          f'password="{SECRET}"; org.apache.kafka.common.security.plain.PlainLoginModule '
                          f'required;'}, "sasl.jaas.config", "more than one login module"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required password="{SECRET}'},
     "sasl.jaas.config", "is not closed"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/t.jks", "ssl.truststore.type": "JKS"},
     "ssl.truststore.type", "only PEM"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.jks", "ssl.keystore.type": "JKS",
      "ssl.keystore.password": SECRET}, "ssl.keystore.type", "keytool -importkeystore"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
     "ssl.endpoint.identification.algorithm", "https, none"),
    ({"security.protocol": "SSL", "ssl.key.location": "/k.pem", "ssl.key.password": SECRET},
     "ssl.key.location", "needs its certificate"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/a.pem", "ssl.truststore.location": "/b.pem"},
     "ssl.truststore.location", "different files"),
])
def test_unsupported_or_inconsistent_settings_are_refused_without_the_secret(config, key, words):
    with pytest.raises(ConfigException) as info:
        security_settings(config)
    assert info.value.key == key and words in info.value.message
    assert SECRET not in info.value.message and SECRET not in repr(info.value)


def test_every_client_takes_the_keys_and_refuses_the_same_way():
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
            "sasl.password": SECRET}
    for make in (lambda c: Admin(dict(BASE, **c)), lambda c: PartitionReader(dict(BASE, **c)),
                 lambda c: AsyncShareConsumer(dict(BASE, **{"group.id": "g"}, **c))):
        client = make(sasl)
        try:
            assert client.config["sasl.username"] == "alice"
            assert SECRET not in repr(getattr(client, "_async", client).security)
        finally:
            if not isinstance(client, AsyncShareConsumer):
                client.close()
        with pytest.raises(ConfigException, match="GSSAPI"):
            make({"security.protocol": "SASL_SSL"})
        with pytest.raises(ConfigException, match="unknown .* configuration key 'sasl.kerberos.service.name'"):
            make({"sasl.kerberos.service.name": "kafka"})


def test_ssl_and_sasl_keys_under_plaintext_are_ignored_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="quafka.client._security"):
        settings = security_settings({"security.protocol": "PLAINTEXT", "sasl.mechanism": "PLAIN",
                                      "sasl.password": SECRET, "ssl.ca.location": "/ca.pem"})
    assert settings.tls is None and settings.sasl is None
    [record] = caplog.records
    assert "sasl.mechanism" in record.getMessage() and "ssl.ca.location" in record.getMessage()
    assert SECRET not in record.getMessage()


# ----------------------------------------------------------------------------- TLS context

@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


def _tls(config):
    return security_settings(dict({"security.protocol": "SSL"}, **config)).tls


def test_a_context_verifies_the_broker_and_its_host_name_by_default(tmp_path, ca):
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    context = build_ssl_context(_tls({"ssl.ca.location": str(tmp_path / "ca.pem")}))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(context.get_ca_certs()) == 1
    no_host = build_ssl_context(_tls({"ssl.ca.location": str(tmp_path / "ca.pem"),
                                      "ssl.endpoint.identification.algorithm": ""}))
    assert no_host.verify_mode == ssl.CERT_REQUIRED and not no_host.check_hostname
    trusting = build_ssl_context(_tls({"enable.ssl.certificate.verification": "false"}))
    assert trusting.verify_mode == ssl.CERT_NONE and not trusting.check_hostname
    inline = build_ssl_context(_tls({"ssl.ca.pem": ca.cert_pem.bytes().decode()}))
    assert len(inline.get_ca_certs()) == 1


def test_client_certificates_load_from_files_inline_pem_a_pem_keystore_and_pkcs12(tmp_path, ca):
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        Encoding,
        PrivateFormat,
        load_pem_private_key,
        pkcs12,
    )
    from cryptography.x509 import load_pem_x509_certificate

    leaf = ca.issue_cert("client@example.com")
    key = load_pem_private_key(leaf.private_key_pem.bytes(), None)
    encrypted = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(SECRET.encode()))
    (tmp_path / "cert.pem").write_bytes(leaf.cert_chain_pems[0].bytes())
    (tmp_path / "key.pem").write_bytes(encrypted)
    (tmp_path / "keystore.pem").write_bytes(encrypted + leaf.cert_chain_pems[0].bytes())
    cert = load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes())
    (tmp_path / "keystore.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", key, cert, None, BestAvailableEncryption(SECRET.encode())))
    for config in ({"ssl.certificate.location": str(tmp_path / "cert.pem"), "ssl.key.location": str(tmp_path / "key.pem"),
                    "ssl.key.password": SECRET},
                   {"ssl.certificate.pem": leaf.cert_chain_pems[0].bytes().decode(), "ssl.key.pem": encrypted.decode(),
                    "ssl.key.password": SECRET},
                   {"ssl.keystore.location": str(tmp_path / "keystore.pem"), "ssl.keystore.type": "PEM",
                    "ssl.key.password": SECRET},
                   {"ssl.keystore.location": str(tmp_path / "keystore.p12"), "ssl.keystore.type": "PKCS12",
                    "ssl.keystore.password": SECRET}):
        assert isinstance(build_ssl_context(_tls(config)), ssl.SSLContext)
    wrong = {"ssl.certificate.location": str(tmp_path / "cert.pem"), "ssl.key.location": str(tmp_path / "key.pem"),
             "ssl.key.password": "wrong-" + SECRET}
    with pytest.raises(ConfigException) as info:
        build_ssl_context(_tls(wrong))
    assert info.value.key == "ssl.certificate.location" and "ssl.key.password" in info.value.message
    assert SECRET not in info.value.message
    with pytest.raises(ConfigException, match="wrong ssl.keystore.password") as info:
        build_ssl_context(_tls({"ssl.keystore.location": str(tmp_path / "keystore.p12"),
                                "ssl.keystore.password": "nope"}))
    assert list(tmp_path.iterdir()) and not any(p.name.startswith("quafka-tls-") for p in tmp_path.iterdir())


def test_a_missing_file_fails_the_constructor_naming_the_key(tmp_path):
    with pytest.raises(ConfigException) as info:
        Admin(dict(BASE, **{"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "missing.pem")}))
    assert info.value.key == "ssl.ca.location" and "missing.pem" in info.value.message


# ----------------------------------------------------------------------------- librdkafka names

def test_java_names_become_librdkafka_names_for_the_confluent_kafka_tools():
    out = librdkafka_security_config({
        "bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM", "ssl.keystore.location": "/ks.pem",
        "ssl.keystore.type": "PEM", "ssl.endpoint.identification.algorithm": "",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                            f'password="{SECRET}";'})
    assert out == {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                   "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/ks.pem", "ssl.key.location": "/ks.pem",
                   "ssl.endpoint.identification.algorithm": "none", "sasl.username": "alice",
                   "sasl.password": SECRET}
    with pytest.raises(ConfigException, match="OAuth"):
        librdkafka_security_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"})
