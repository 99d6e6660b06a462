"""The ssl.* keys (Kafka's SslConfigs, BrokerSecurityConfigs): validated one by one and as a
whole with DefaultSslEngineFactory's messages, key stores in PKCS12 and PEM (file and inline)
loaded, bad stores refused naming the key and never the password; ssl.principal.mapping.rules as
SslPrincipalMapper applies them; DNs printed as Java's X500Principal.getName()."""

from __future__ import annotations

import socket
import ssl

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from quafka.broker import config as cfg
from quafka.broker.core.ssl_principal import NoMatchingRule, parse_rules, principal_name
from quafka.broker.server.embedded import EmbeddedBroker
from quafka.broker.server.tls import java_dn
from support.tls_certs import STORE_PASSWORD, broker_ssl_config, make_certs

SSL_LISTENERS = {"listeners": "SSL://127.0.0.1:0"}


def _refused(props: dict) -> str:
    with pytest.raises(cfg.ConfigError) as err:
        cfg.BrokerConfig.from_props(props)
    return str(err.value)


# --------------------------------------------------------------------------- keys one by one


def test_ssl_keys_are_served_with_kafkas_defaults():
    c = cfg.BrokerConfig.from_props({})
    assert c.get("ssl.enabled.protocols") == ["TLSv1.2", "TLSv1.3"]
    assert c.get("ssl.protocol") == "TLSv1.3"
    assert c.get("ssl.client.auth") == "none"
    assert c.get("ssl.keystore.type") == "JKS" and c.get("ssl.truststore.type") == "JKS"
    assert c.get("ssl.endpoint.identification.algorithm") == "https"
    assert c.get("ssl.principal.mapping.rules") == "DEFAULT"
    assert c.get("ssl.cipher.suites") == []


@pytest.mark.parametrize("key,value,expected", [
    ("ssl.client.auth", "always", "String must be one of: required, requested, none"),
    ("ssl.enabled.protocols", "TLSv1.1,TLSv1.2", "TLSv1.1 is not served"),
    ("ssl.protocol", "SSLv3", "quafka serves TLSv1.2 and TLSv1.3 only"),
    ("ssl.keystore.type", "BCFKS", "String must be one of: PKCS12, PEM, JKS"),
    ("ssl.provider", "SunJSSE", "there are no Java security providers"),
    ("ssl.engine.factory.class", "com.example.Factory", "cannot load a Java SslEngineFactory"),
    ("ssl.keymanager.algorithm", "PKIX", "String must be one of: SunX509"),
    ("ssl.principal.mapping.rules", "RULE:^CN=(.*)$/$1/ junk", "unmatched substring"),
])
def test_a_bad_ssl_value_is_refused_naming_the_key(key, value, expected):
    message = _refused({key: value})
    assert f"configuration {key}" in message and expected in message


def test_ssl_keys_were_refused_before_as_unknown_and_other_ssl_names_still_are():
    assert "Unknown configuration ssl.bogus" in _refused({"ssl.bogus": "1"})


# --------------------------------------------------------------------------- as a whole


def test_an_ssl_listener_without_a_key_store_is_refused():
    message = _refused(SSL_LISTENERS)
    assert "ssl.keystore.location" in message and "needs a key store" in message and "listener SSL" in message
    message = _refused({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"})
    assert "SASL_SSL listener needs a key store" in message
    cfg.BrokerConfig.from_props({"listeners": "PLAINTEXT://127.0.0.1:0"})  # PLAINTEXT needs none


@pytest.mark.parametrize("props,key,expected", [
    ({"ssl.keystore.location": "/x.p12", "ssl.keystore.type": "PKCS12"}, "ssl.keystore.location",
     "SSL key store is specified, but key store password is not specified."),
    ({"ssl.keystore.location": "/x.pem", "ssl.keystore.type": "PEM", "ssl.keystore.password": "pw-1"},
     "ssl.keystore.password", "SSL key store password cannot be specified with PEM format"),
    ({"ssl.keystore.key": "k", "ssl.keystore.type": "PKCS12"}, "ssl.keystore.key",
     "SSL private key can be specified only for PEM, but key store type is PKCS12."),
    ({"ssl.keystore.key": "k", "ssl.keystore.type": "PEM"}, "ssl.keystore.key",
     "SSL private key is specified, but certificate chain is not specified."),
    ({"ssl.keystore.certificate.chain": "c", "ssl.keystore.type": "PEM"}, "ssl.keystore.certificate.chain",
     "SSL certificate chain is specified, but private key is not specified"),
    ({"ssl.keystore.location": "/x.pem", "ssl.keystore.type": "PEM", "ssl.truststore.certificates": "c"},
     "ssl.truststore.certificates", "SSL trust store certs can be specified only for PEM, but trust store type is JKS."),
    ({"ssl.keystore.location": "/x.pem", "ssl.keystore.type": "PEM", "ssl.truststore.password": "pw-2"},
     "ssl.truststore.password", "SSL trust store is not specified, but trust store password is specified."),
])
def test_key_store_combinations_are_refused_with_kafkas_messages(props, key, expected):
    message = _refused({**SSL_LISTENERS, **props})
    assert f"configuration {key}" in message and expected in message
    assert "pw-1" not in message and "pw-2" not in message


def test_per_listener_settings_win_and_are_named_in_errors():
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
             "listener.name.ssl.ssl.keystore.location": "/broker.pem",
             "listener.name.ssl.ssl.keystore.password": "pw-3"}
    message = _refused(props)
    assert "listener.name.ssl.ssl.keystore.password" in message and "pw-3" not in message
    assert "[hidden]" in message
    # a password given for an unknown listener is not shown either
    message = _refused({"listener.name.other.ssl.key.password": "pw-4"})
    assert "pw-4" not in message
    del props["listener.name.ssl.ssl.keystore.password"]
    c = cfg.BrokerConfig.from_props(props)
    assert "pw-4" not in repr(cfg.BrokerConfig.from_props({"ssl.key.password": "pw-4"}))
    assert c.listener_prop("SSL", "ssl.keystore.location") == "/broker.pem"


# --------------------------------------------------------------------------- stores that load, or not


def _tls_handshake(addr: str, ca_pem: str) -> str:
    host, port = addr.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=ca_pem)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.version()


@pytest.mark.parametrize("store", ["PKCS12", "JKS-typed PKCS12", "PEM file", "PEM inline", "encrypted PEM inline"])
def test_key_stores_in_pkcs12_and_pem_load(tmp_path, store):
    certs = make_certs(tmp_path)
    leaf = certs.broker_leaf()
    props = {"listeners": "SSL://127.0.0.1:0"}
    if store in ("PKCS12", "JKS-typed PKCS12"):
        props.update({"ssl.keystore.type": "PKCS12" if store == "PKCS12" else "JKS",
                      "ssl.keystore.location": certs.pkcs12("broker", leaf),
                      "ssl.keystore.password": STORE_PASSWORD})
    elif store == "PEM file":
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.pem("broker", leaf)})
    else:
        from cryptography.hazmat.primitives import serialization

        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
        encryption = serialization.NoEncryption()
        if store == "encrypted PEM inline":
            encryption = serialization.BestAvailableEncryption(b"key-pw")
            props["ssl.key.password"] = "key-pw"
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        # as a .properties file with continuation lines gives it: one line, blanks between the parts
        props.update({"ssl.keystore.type": "PEM",
                      "ssl.keystore.key": " ".join(key_pem.decode().split("\n")),
                      "ssl.keystore.certificate.chain": " ".join(b.bytes().decode() for b in leaf.cert_chain_pems),
                      "ssl.truststore.type": "PEM",
                      "ssl.truststore.certificates": certs.ca.cert_pem.bytes().decode()})
    with EmbeddedBroker(config=props) as broker:
        assert _tls_handshake(broker.bootstrap_servers, certs.ca_pem) == "TLSv1.3"


def _start_refused(props: dict) -> str:
    with pytest.raises(cfg.ConfigError) as err:
        EmbeddedBroker(config=props).start()
    return str(err.value)


def test_a_key_store_that_does_not_load_refuses_the_start_naming_the_key(tmp_path):
    certs = make_certs(tmp_path)
    p12 = certs.pkcs12("broker", certs.broker_leaf())
    base = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": p12}
    message = _start_refused({**base, "ssl.keystore.password": "wrong-password-7"})
    assert "ssl.keystore.location" in message and "does not load as a PKCS12 store" in message
    assert "wrong-password-7" not in message and STORE_PASSWORD not in message
    missing = _start_refused({**base, "ssl.keystore.location": str(tmp_path / "nope.p12"),
                              "ssl.keystore.password": STORE_PASSWORD})
    assert "cannot read" in missing and "nope.p12" in missing
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 64)
    message = _start_refused({**base, "ssl.keystore.type": "JKS", "ssl.keystore.location": str(jks),
                              "ssl.keystore.password": STORE_PASSWORD})
    assert "is a JKS store, which Python cannot read" in message and "-deststoretype PKCS12" in message
    garbage = tmp_path / "broker.pem"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    message = _start_refused({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                              "ssl.keystore.location": str(garbage)})
    assert "ssl.keystore.location" in message and "private key could not be loaded" in message
    assert "bm90IGEga2V5" not in message


def test_cipher_suites_by_java_name(tmp_path):
    certs = make_certs(tmp_path)
    props = broker_ssl_config(certs, **{"ssl.enabled.protocols": "TLSv1.2",
                                        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"})
    with EmbeddedBroker(config=props) as broker:
        host, port = broker.listener_address("SSL").rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=certs.ca_pem)
        with ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10), server_hostname="localhost") as t:
            assert t.version() == "TLSv1.2" and t.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    message = _start_refused(broker_ssl_config(certs, **{"ssl.cipher.suites": "TLS_NOT_A_SUITE"}))
    assert "ssl.cipher.suites" in message and "TLS_NOT_A_SUITE" in message


# --------------------------------------------------------------------------- principals


def test_principal_mapping_rules_as_ssl_principal_mapper():
    rules = parse_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
                        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT")
    assert principal_name(rules, "CN=kafka-server,OU=ServiceUsers,O=Org,C=US") == "kafka-server"
    assert principal_name(rules, "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US") == \
        "duke@javasoft"
    assert principal_name(rules, "cn=duke,ou=javasoft,dc=global,dc=example") == "DUKE@JAVASOFT"
    assert principal_name(rules, "OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    # $3 with two groups stays literal (escapeLiteralBackReferences); \\/ escapes a slash
    assert principal_name(parse_rules("RULE:^CN=(.*),O=(.*)$/$1\\/$3/"), "CN=a,O=b") == "a/$3"
    with pytest.raises(NoMatchingRule):
        principal_name(parse_rules("RULE:^CN=(.*)$/$1/"), "O=nobody")


def test_distinguished_names_print_as_javas_x500_principal():
    name = x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc"),
        x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"),
        x509.NameAttribute(NameOID.COMMON_NAME, " #alice=x "),
    ])
    # last RDN first; , = # and leading/trailing blanks escaped; emailAddress is no RFC 2253
    # keyword: OID=#<DER of the IA5String>
    assert java_dn(name) == "CN=\\ \\#alice\\=x\\ ,1.2.840.113549.1.9.1=#1605614062" + "2e63,O=Acme\\, Inc,C=US"
