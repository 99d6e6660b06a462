"""The configuration keys quafka knows: their Kafka names, types, defaults, valid ranges and
update modes (Apache Kafka 4.2-4.4) for the broker, topics and (share) groups, the broker keys it
accepts but ignores, and the generated documentation tables.

`quafka.broker.config` builds the configuration objects on top of these tables; the key type, the
typed parsing and the validators live in `_config_types`.
"""

from __future__ import annotations

import re
from typing import Any

from quafka.broker.core.acl import AclError, parse_super_users
from quafka.broker.core.jaas import JaasError, server_login_module
from quafka.broker._config_types import (  # noqa: F401 - some are re-exported for config.py
    CLUSTER_WIDE,
    MAX_LONG,
    PER_BROKER,
    PER_GROUP,
    PER_TOPIC,
    READ_ONLY,
    Check,
    ConfigError,
    ConfigKey,
    LISTENER_RE,
    _any,
    _at_least,
    _in_range,
    _auto_offset_reset,
    _between,
    _cleanup_policy,
    _compression_type,
    _one_cleaner_thread,
    _dir_list,
    _false_only,
    _gzip_level,
    _key,
    _listener_list,
    _NO_EFFECT,
    _one_of,
    _one_of_reason,
    _null_only,
    _principal_rules,
    _store_type,
    _tls_versions,
    _consumer_assignors,
    _share_assignors,
    _throttled_replicas,
    invalid,
    iso_duration_ms,
    render_value,
)

__all__ = [
    "BROKER_KEYS",
    "CLUSTER_WIDE",
    "ConfigError",
    "ConfigKey",
    "GROUP_KEYS",
    "IGNORED_KEYS",
    "IGNORED_PREFIXES",
    "LISTENER_RE",
    "MAX_LONG",
    "PER_BROKER",
    "PER_GROUP",
    "PER_TOPIC",
    "READ_ONLY",
    "TOPIC_KEYS",
    "TOPIC_SYNONYMS",
    "ignored_reason",
    "invalid",
    "iso_duration_ms",
    "markdown_tables",
    "parse_metrics_listener",
    "rejected_reason",
    "render_docs",
    "render_value",
]
# --------------------------------------------------------------------------- broker keys

_METRICS_LISTENER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(\[[^\]]*\]|[^:/\[\]]*):([0-9]+)/?$")


def parse_metrics_listener(value: str | None) -> tuple[str, int] | None:
    """`metrics.listener`: "http://HOST:PORT" -> (host, port); empty -> None (metrics off). Raises
    ValueError saying what is wrong with a malformed value."""
    value = (value or "").strip()
    if not value:
        return None
    m = _METRICS_LISTENER_RE.match(value)
    if m is None:
        raise ValueError("expected http://HOST:PORT, or an empty value to turn metrics off")
    scheme, host, port_text = m.groups()
    if scheme.lower() != "http":
        raise ValueError(f"the scheme must be http (found {scheme}); quafka serves metrics over plain HTTP")
    if host.startswith("["):
        host = host[1:-1]
    if not host:
        raise ValueError("a host is required (0.0.0.0 binds every interface)")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"the port must be between 0 and 65535 (found {port})")
    return host, port


def parse_connection_overrides(value: str | None) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: "host:count,host:count" -> {host: count}; raises
    ValueError naming the bad entry (Kafka's DynamicConnectionQuota / ConnectionQuotas)."""
    out: dict[str, int] = {}
    for entry in (value or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"{entry!r} is not host:count")
        try:
            number = int(count)
        except ValueError:
            raise ValueError(f"{entry!r}: the count must be an integer") from None
        if number < 0:
            raise ValueError(f"{entry!r}: the count must be at least 0")
        out[host] = number
    return out


def _connection_overrides() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        try:
            parse_connection_overrides(v)
        except ValueError as exc:
            return str(exc)
        return None

    return "host:count,... (empty: none)", check


def _metrics_listener() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        try:
            parse_metrics_listener(v)
        except ValueError as exc:
            return str(exc)
        return None

    return "http://host:port (port 0: any free port) or empty (off)", check


_DASHBOARD_EXTENSION = "a quafka extension, not in Kafka; off by default"


def _dashboard_listener() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        try:
            parse_metrics_listener(v)  # the same grammar
        except ValueError as exc:
            return str(exc).replace("turn metrics off", "turn the dashboard off").replace(
                "quafka serves metrics", "quafka serves the dashboard")
        return None

    return "http://host:port (port 0: any free port) or empty (off)", check


def _worker_metrics_urls() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        for url in _split_list(v):
            if not re.match(r"^https?://[^/\s]+(/\S*)?$", url):
                return f"{url!r} is not an http(s)://host[:port]/path URL"
        return None

    return "comma-separated http(s)://host:port/metrics URLs, or empty", check


def _split_list(v: Any) -> list[str]:
    items = v if isinstance(v, (list, tuple)) else str(v or "").split(",")
    return [str(item).strip() for item in items if str(item).strip()]


# -- ACLs (issue 29): Kafka's StandardAuthorizer is the one authorizer quafka has (server/authorizer.py)
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_REMOVED_AUTHORIZERS = {"kafka.security.authorizer.AclAuthorizer": "it was removed in Kafka 4.0 with ZooKeeper; "
                        f"use {STANDARD_AUTHORIZER}, whose ACLs live in the metadata log"}


def _authorizer_class() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if not v or v == STANDARD_AUTHORIZER:
            return None
        if v in _REMOVED_AUTHORIZERS:
            return f"authorizer {v} is not supported: {_REMOVED_AUTHORIZERS[v]}"
        return (f"quafka cannot load the Java class {v}; its one authorizer is {STANDARD_AUTHORIZER} "
                "(or empty for none)")

    return f"[empty, {STANDARD_AUTHORIZER}]", check


def _super_users() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        try:
            parse_super_users(v or "")
        except AclError as exc:
            return str(exc)
        return None

    return "principals separated by ;", check


# The watermark's default: 256 MiB (or 1 % of the file system when that is more) is the reserve that
# the writes still made below it draw on — share-state and group-offset records of a few hundred
# bytes per acknowledgement round, so millions of rounds; and more than two 100 MiB
# __share_group_state segments, so pruning (which deletes whole segments) can still reclaim space.
# The percentage grows the reserve with the disk, as file systems and other writers need.
_MIN_FREE_NOTE = ("a quafka extension, not in Kafka (a full disk takes Kafka's log directory offline); on by default; "
                  "free space is checked every second and after deletions")

_SSL_KEYS = [
    _key("ssl.keystore.type", "string", "JKS", _store_type(),
         "The format of the key store: PKCS12, PEM, or JKS (Kafka's default).",
         note="a JKS file cannot be read from Python: it is refused with how to convert it; a PKCS12 file "
         "given with the type JKS is read, as Java 9+ reads it"),
    _key("ssl.keystore.location", "string", None, _any(),
         "The key store file (the broker's certificate chain and private key)."),
    _key("ssl.keystore.password", "password", None, _any(),
         "The key store's password (PKCS12/JKS; not allowed with PEM, where only ssl.key.password is)."),
    _key("ssl.key.password", "password", None, _any(),
         "The password of the private key in the key store (PKCS12), or of an encrypted PEM private key."),
    _key("ssl.keystore.certificate.chain", "password", None, _any(),
         "The certificate chain in PEM, given inline (Kafka 2.7+, ssl.keystore.type=PEM)."),
    _key("ssl.keystore.key", "password", None, _any(),
         "The private key in PEM (PKCS#8, optionally encrypted with ssl.key.password), given inline "
         "(Kafka 2.7+, ssl.keystore.type=PEM)."),
    _key("ssl.truststore.type", "string", "JKS", _store_type(),
         "The format of the trust store: PKCS12, PEM, or JKS (Kafka's default).",
         note="as ssl.keystore.type"),
    _key("ssl.truststore.location", "string", None, _any(),
         "The trust store file: the certificate authorities client certificates are checked against."),
    _key("ssl.truststore.password", "password", None, _any(),
         "The trust store's password (not allowed with PEM)."),
    _key("ssl.truststore.certificates", "password", None, _any(),
         "Trusted certificates in PEM, given inline (Kafka 2.7+, ssl.truststore.type=PEM)."),
    _key("ssl.client.auth", "string", "none", _one_of("required", "requested", "none"),
         "Whether clients must present a certificate: required, requested (optional), none."),
    _key("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], _tls_versions(),
         "The TLS versions a client may negotiate."),
    _key("ssl.protocol", "string", "TLSv1.3", _one_of_reason(
        ("TLSv1.3", "TLSv1.2", "TLS"),
        "quafka serves TLSv1.2 and TLSv1.3 only (SSLv3, TLSv1 and TLSv1.1 are disabled in current JDKs and OpenSSL)"),
         "The protocol of the TLS context; the versions offered are those of ssl.enabled.protocols "
         "(when that list is empty: TLSv1.2 caps at TLSv1.2, TLSv1.3 and TLS allow both)."),
    _key("ssl.cipher.suites", "list", [], _any(),
         "The TLS 1.2 cipher suites allowed, by their standard (IANA) names as Java names them; empty allows "
         "OpenSSL's defaults.",
         note="OpenSSL names are accepted too; TLS 1.3 suites cannot be narrowed from Python, so a list naming "
         "some but not all of them is refused; a list naming only TLS 1.3 suites turns TLSv1.2 off"),
    _key("ssl.endpoint.identification.algorithm", "string", "https", _any(),
         "Host-name verification of the server certificate, by clients.",
         note="accepted; a broker never checks a client's host name, in Kafka neither (DefaultSslEngineFactory "
         "sets it on client engines only)"),
    _key("ssl.principal.mapping.rules", "string", "DEFAULT", _principal_rules(),
         "How a client certificate's distinguished name becomes the principal name: DEFAULT (the DN itself), "
         "or RULE:pattern/replacement/ with an optional L or U suffix (lower/upper case), tried in order."),
    _key("ssl.keymanager.algorithm", "string", "SunX509", _one_of_reason(
        ("SunX509",), "quafka builds its TLS context with OpenSSL, which has no Java key manager factories"),
         "The key manager factory algorithm (the JVM's default).", note="only the JVM default is accepted"),
    _key("ssl.trustmanager.algorithm", "string", "PKIX", _one_of_reason(
        ("PKIX",), "quafka builds its TLS context with OpenSSL, which checks certificate paths as PKIX does"),
         "The trust manager factory algorithm (the JVM's default).", note="only the JVM default is accepted"),
    _key("ssl.provider", "string", None, _null_only("quafka uses OpenSSL through Python's ssl module; there are no "
                                                     "Java security providers to choose"),
         "The Java security provider of the TLS context.", note="only null (unset) is accepted"),
    _key("ssl.secure.random.implementation", "string", None, _null_only(
        "OpenSSL draws its own random numbers; there is no Java SecureRandom to choose"),
         "The SecureRandom implementation.", note="only null (unset) is accepted"),
    _key("ssl.engine.factory.class", "class", None, _null_only("quafka cannot load a Java SslEngineFactory class"),
         "A custom SslEngineFactory class.", note="only null (unset) is accepted"),
    _key("quafka.ssl.handshake.timeout.ms", "int", 10000, _at_least(1),
         "How long a client on an SSL or SASL_SSL listener has to complete its TLS handshake; a client that "
         "has not is disconnected (and counted in quafka_tls_handshake_failures_total).",
         note="quafka only (Kafka has no handshake deadline: connections.max.idle.ms closes such a connection, "
         "after 10 minutes by default)"),
    _key("ssl.allow.dn.changes", "boolean", False, _any(),
         "Whether a dynamically updated key store may change the certificate's distinguished name.",
         note=_NO_EFFECT + " (quafka loads key stores once, at start-up)"),
    _key("ssl.allow.san.changes", "boolean", False, _any(),
         "Whether a dynamically updated key store may change the certificate's subject alternative names.",
         note=_NO_EFFECT + " (quafka loads key stores once, at start-up)"),
]
# quafka's SASL mechanisms (Kafka's default, GSSAPI, and OAUTHBEARER are not served: _sasl_mechanisms says so)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_UNSERVED_MECHANISMS = {
    "GSSAPI": "quafka does not serve GSSAPI (Kerberos): use SCRAM-SHA-256 or SCRAM-SHA-512",
    "OAUTHBEARER": "quafka does not serve OAUTHBEARER: use SCRAM-SHA-256 or SCRAM-SHA-512",
}


def _sasl_mechanisms() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        for item in v or ():
            if item in _UNSERVED_MECHANISMS:
                return _UNSERVED_MECHANISMS[item]
            if item not in SASL_MECHANISMS:
                return f"{item} is not a SASL mechanism quafka serves ({', '.join(SASL_MECHANISMS)})"
        return None

    return "[" + ", ".join(SASL_MECHANISMS) + "]", check


def _jaas_config() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if v is None:
            return None
        try:
            server_login_module(v)
        except JaasError as exc:
            return f"not a valid JAAS configuration: {exc}"
        return None

    return "one JAAS login module entry", check


_BROKER = [
    # -- node and network
    _key("node.id", "int", 1, _at_least(0), "Id of this node, reported as the broker id and the controller id.",
         note="default 1; Kafka has no default and requires it"),
    _key("broker.id", "int", None, _any(), "Older name of node.id; when both are set they must be equal."),
    _key("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"], _listener_list(allow_null=False),
         "Addresses the broker binds, as NAME://host:port; an empty host binds every interface.",
         PER_BROKER, note="default PLAINTEXT://127.0.0.1:9092 (Kafka: PLAINTEXT://:9092)"),
    _key("advertised.listeners", "list", None, _listener_list(allow_null=True),
         "Addresses given to clients in Metadata responses; null means the listeners."),
    _key("socket.request.max.bytes", "int", 104857600, _at_least(1),
         "Largest request frame accepted; a larger one closes the connection."),
    _key("fetch.max.bytes", "int", 57671680, _at_least(1024),
         "Most record bytes one Fetch or ShareFetch response returns, whatever the request's MaxBytes "
         "(at least one batch is still returned); bounds what a client that does not read its "
         "responses can pin in memory."),
    # -- authorization (issue 29): server/authorizer.py, docs/security.md "ACLs"
    _key("authorizer.class.name", "string", "", _authorizer_class(),
         "The authorizer that checks every request against the ACLs; empty (the default) allows every request "
         "and answers the ACL APIs with SECURITY_DISABLED.",
         note=f"only {STANDARD_AUTHORIZER} (kafka.security.authorizer.AclAuthorizer was removed in Kafka 4.0)"),
    _key("super.users", "string", "", _super_users(),
         "Principals allowed every operation whatever the ACLs, separated by semicolons: User:admin;User:ops."),
    _key("allow.everyone.if.no.acl.found", "boolean", False, _any(),
         "Allow a request on a resource that has no ACL at all (for anyone); false denies it."),
    # -- topics and groups
    _key("num.partitions", "int", 1, _at_least(1),
         "Partition count of auto-created topics and of CreateTopics with -1."),
    _key("auto.create.topics.enable", "boolean", True, _any(),
         "Create a topic on first use by a Metadata request that allows it."),
    _key("delete.topic.enable", "boolean", True, _any(), "Allow DeleteTopics; when false it fails."),
    _key("offsets.topic.num.partitions", "int", 50, _at_least(1),
         "Partition count of __consumer_offsets; fixed once the topic exists."),
    _key("offsets.topic.segment.bytes", "int", 1048576, _at_least(1048576),
         "segment.bytes of __consumer_offsets (a compacted topic): the active segment is never compacted, so "
         "this bounds what a restart replays beyond the live keys.",
         note="default 1 MiB (Kafka: 100 MiB): quafka replays records about 40 times slower than Kafka, and a "
              "restart replays the whole active segment; set at the topic's creation, as in Kafka"),
    _key("group.min.session.timeout.ms", "int", 6000, _at_least(0),
         "Shortest session timeout a classic group member may ask for in JoinGroup; a shorter one gets "
         "INVALID_SESSION_TIMEOUT."),
    _key("group.max.session.timeout.ms", "int", 1800000, _at_least(0),
         "Longest session timeout a classic group member may ask for in JoinGroup; a longer one gets "
         "INVALID_SESSION_TIMEOUT."),
    _key("group.initial.rebalance.delay.ms", "int", 3000, _at_least(0),
         "How long the first rebalance of an empty classic group waits for more members to join "
         "(extended while members keep joining, up to the rebalance timeout)."),
    _key("group.max.size", "int", 2147483647, _at_least(1),
         "Most members a classic group may have; a member joining beyond it gets GROUP_MAX_SIZE_REACHED."),
    _key("offset.metadata.max.bytes", "int", 4096, _at_least(0),
         "Longest metadata string an offset commit may carry (counted in characters, as Kafka counts); "
         "a longer one fails its partition with OFFSET_METADATA_TOO_LARGE."),
    _key("offsets.retention.minutes", "int", 10080, _at_least(1),
         "How long committed offsets are kept: for a simple consumer group (one that only commits) from "
         "each commit, for a classic group from the moment it became Empty; then they expire."),
    _key("offsets.retention.check.interval.ms", "long", 600000, _at_least(1),
         "How often expired committed offsets are removed."),
    _key("message.max.bytes", "int", 1048588, _at_least(0), "Largest record batch accepted by produce.",
         CLUSTER_WIDE, "max.message.bytes"),
    _key("compression.type", "string", "producer", _compression_type(),
         "Default codec batches are stored with: producer keeps each batch's own codec; any other value "
         "makes the broker rewrite batches sent with another codec into this one (docs/storage.md).",
         CLUSTER_WIDE, "compression.type"),
    _key("compression.gzip.level", "int", -1, _gzip_level(),
         "Gzip level the broker compresses at when it rewrites a batch into gzip (-1: level 6).",
         CLUSTER_WIDE, "compression.gzip.level"),
    _key("compression.lz4.level", "int", 9, _between(1, 17),
         "LZ4 level the broker compresses at when it rewrites a batch into lz4.",
         CLUSTER_WIDE, "compression.lz4.level"),
    _key("compression.zstd.level", "int", 3, _between(-131072, 22),
         "Zstd level the broker compresses at when it rewrites a batch into zstd.",
         CLUSTER_WIDE, "compression.zstd.level"),
    # Kafka's cluster-wide default of the topic config; with eligible.leader.replicas.version 1 (a new
    # cluster) it is also set at cluster level in the metadata journal (core/elr.py)
    _key("min.insync.replicas", "int", 1, _at_least(1),
         "Default min.insync.replicas of topics: replicas that must hold a write acknowledged with acks=all.",
         CLUSTER_WIDE, "min.insync.replicas",
         note="one node: the ISR is always this broker alone, so acks=all waits for nothing more; with "
         "eligible.leader.replicas.version 1 it is a cluster-level dynamic config that cannot be removed"),
    # -- log directory
    _key("log.dir", "list", ["./quafka-data"], _dir_list(allow_null=False),
         "Data directory, used when log.dirs is not set.",
         note="default ./quafka-data (Kafka: /tmp/kafka-logs); exactly one directory"),
    _key("log.dirs", "list", None, _dir_list(allow_null=True), "Data directory; wins over log.dir.",
         note="exactly one directory"),
    # quafka's free-space watermark (docs/durability.md "A nearly full disk"); on by default: see _MIN_FREE_NOTE
    _key("quafka.log.dir.min.free.bytes", "long", 256 << 20, _at_least(0),
         "Free space the log directory keeps: below the larger of this and quafka.log.dir.min.free.percent, "
         "produces to user topics are refused with KAFKA_STORAGE_ERROR (retriable) while fetches, share groups "
         "and internal topics go on; produces resume by themselves once space is freed. 0 for both turns it off.",
         CLUSTER_WIDE, note=_MIN_FREE_NOTE),
    _key("quafka.log.dir.min.free.percent", "double", 1.0, _in_range(0.0, 50.0),
         "The same watermark as a percentage of the log directory's file system size; the larger of the two "
         "applies. 0 for both turns it off.", CLUSTER_WIDE, note=_MIN_FREE_NOTE),
    # -- segments
    _key("log.segment.bytes", "int", 1073741824, _at_least(1048576), "Size at which a segment is rolled.",
         CLUSTER_WIDE, "segment.bytes"),
    _key("log.roll.ms", "long", None, _at_least(1),
         "Age at which a non-empty segment is rolled; wins over log.roll.hours.",
         CLUSTER_WIDE, "segment.ms"),
    _key("log.roll.hours", "int", 168, _at_least(1), "Segment roll age in hours, used when log.roll.ms is not set.",
         READ_ONLY, "segment.ms"),
    _key("log.roll.jitter.ms", "long", None, _at_least(0), "Random jitter subtracted from the roll age.",
         CLUSTER_WIDE, "segment.jitter.ms", note=_NO_EFFECT),
    _key("log.roll.jitter.hours", "int", 0, _at_least(0),
         "Roll jitter in hours, used when log.roll.jitter.ms is not set.",
         READ_ONLY, "segment.jitter.ms", note=_NO_EFFECT),
    _key("log.index.size.max.bytes", "int", 10485760, _at_least(4), "Largest offset index of one segment.",
         CLUSTER_WIDE, "segment.index.bytes", note=_NO_EFFECT),
    _key("log.index.interval.bytes", "int", 4096, _at_least(0), "Bytes of batches between two offset index entries.",
         CLUSTER_WIDE, "index.interval.bytes"),
    _key("log.preallocate", "boolean", False, _any(), "Preallocate segment files on creation.",
         CLUSTER_WIDE, "preallocate", note=_NO_EFFECT),
    _key("log.segment.delete.delay.ms", "long", 60000, _at_least(0),
         "Wait before a deleted segment's files are removed.",
         CLUSTER_WIDE, "file.delete.delay.ms", note=_NO_EFFECT + " (segments are removed at once)"),
    # -- retention
    _key("log.retention.ms", "long", None, _any(),
         "Age after which old segments are deleted; any negative value means unlimited. Wins over minutes and hours.",
         CLUSTER_WIDE, "retention.ms"),
    _key("log.retention.minutes", "int", None, _any(),
         "Retention in minutes, used when log.retention.ms is not set.", READ_ONLY, "retention.ms"),
    _key("log.retention.hours", "int", 168, _any(),
         "Retention in hours, used when neither log.retention.ms nor log.retention.minutes is set.",
         READ_ONLY, "retention.ms"),
    _key("log.retention.bytes", "long", -1, _any(),
         "Partition size above which old segments are deleted; -1 = unlimited.",
         CLUSTER_WIDE, "retention.bytes"),
    _key("log.retention.check.interval.ms", "long", 300000, _at_least(1), "How often retention is enforced."),
    _key("log.cleanup.policy", "list", ["delete"], _cleanup_policy(),
         "What happens to old segments: delete (retention), compact (keep the latest record of each key), both, "
         "or nothing (empty value).", CLUSTER_WIDE, "cleanup.policy"),
    # -- the log cleaner (compaction: docs/storage.md "Log compaction")
    _key("log.cleaner.enable", "boolean", True, _any(),
         "Run the log cleaner; without it compacted topics are not compacted."),
    _key("log.cleaner.threads", "int", 1, _one_cleaner_thread(), "Log cleaner threads.", CLUSTER_WIDE,
         note="exactly one"),
    _key("log.cleaner.dedupe.buffer.size", "long", 134217728, _at_least(0),
         "Memory for the key -> offset map of one cleaning round (24 bytes a key, as Kafka counts); a log with "
         "more keys in its dirty part is cleaned over several rounds.", CLUSTER_WIDE),
    _key("log.cleaner.io.buffer.size", "int", 524288, _at_least(0),
         "Bytes the cleaner reads from a segment at a time.", CLUSTER_WIDE),
    _key("log.cleaner.io.buffer.load.factor", "double", 0.9, _any(),
         "How full the dedupe buffer's map may get.", CLUSTER_WIDE),
    _key("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, _any(),
         "Throttle: bytes the cleaner reads plus writes per second.", CLUSTER_WIDE),
    _key("log.cleaner.backoff.ms", "long", 15000, _at_least(0),
         "Sleep of the cleaner when no log needs cleaning.", CLUSTER_WIDE),
    _key("log.cleaner.min.cleanable.ratio", "double", 0.5, _between(0, 1),
         "Dirty share of a compacted log above which it is cleaned.", CLUSTER_WIDE, "min.cleanable.dirty.ratio"),
    _key("log.cleaner.min.compaction.lag.ms", "long", 0, _at_least(0),
         "Shortest time a record stays uncompacted.", CLUSTER_WIDE, "min.compaction.lag.ms"),
    _key("log.cleaner.max.compaction.lag.ms", "long", MAX_LONG, _at_least(1),
         "Longest time a record may stay uncompacted once its segment is rolled.", CLUSTER_WIDE,
         "max.compaction.lag.ms"),
    _key("log.cleaner.delete.retention.ms", "long", 86400000, _at_least(0),
         "How long a tombstone stays after the cleaning that first saw it.", CLUSTER_WIDE, "delete.retention.ms"),
    # -- flushing
    _key("log.flush.interval.messages", "long", MAX_LONG, _at_least(1),
         "fsync a partition after this many unflushed records.",
         CLUSTER_WIDE, "flush.messages"),
    _key("log.flush.interval.ms", "long", None, _at_least(0),
         "fsync a partition whose oldest unflushed append is this old; null means log.flush.scheduler.interval.ms.",
         CLUSTER_WIDE, "flush.ms"),
    _key("log.flush.scheduler.interval.ms", "long", MAX_LONG, _any(),
         "Longest wait between checks for partitions due an fsync by flush.ms; the default of log.flush.interval.ms.",
         READ_ONLY, "flush.ms"),
    # -- timestamps
    _key("log.message.timestamp.type", "string", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
         "Keep the producer's timestamps (CreateTime) or stamp the append time (LogAppendTime).",
         CLUSTER_WIDE, "message.timestamp.type"),
    _key("log.message.timestamp.before.max.ms", "long", MAX_LONG, _at_least(0),
         "How far in the past a CreateTime timestamp may be.", CLUSTER_WIDE, "message.timestamp.before.max.ms"),
    _key("log.message.timestamp.after.max.ms", "long", 3600000, _at_least(0),
         "How far in the future a CreateTime timestamp may be.", CLUSTER_WIDE, "message.timestamp.after.max.ms"),
    # -- consumer groups of KIP-848 (group.protocol=consumer): the group coordinator
    _key("group.consumer.session.timeout.ms", "int", 45000, _at_least(1),
         "Default consumer.session.timeout.ms: a consumer group member that does not heartbeat for this long is "
         "removed."),
    _key("group.consumer.min.session.timeout.ms", "int", 45000, _at_least(1),
         "Lowest consumer.session.timeout.ms a group may set."),
    _key("group.consumer.max.session.timeout.ms", "int", 60000, _at_least(1),
         "Highest consumer.session.timeout.ms a group may set."),
    _key("group.consumer.heartbeat.interval.ms", "int", 5000, _at_least(1),
         "Default consumer.heartbeat.interval.ms: how often consumer group members are told to heartbeat."),
    _key("group.consumer.min.heartbeat.interval.ms", "int", 5000, _at_least(1),
         "Lowest consumer.heartbeat.interval.ms a group may set."),
    _key("group.consumer.max.heartbeat.interval.ms", "int", 15000, _at_least(1),
         "Highest consumer.heartbeat.interval.ms a group may set."),
    _key("group.consumer.max.size", "int", 2147483647, _at_least(1),
         "Most members a consumer group may have; a join beyond it gets GROUP_MAX_SIZE_REACHED."),
    _key("group.consumer.assignors", "list", ["uniform", "range"], _consumer_assignors(),
         "The server-side assignors members may choose (group.remote.assignor); the first is the default.",
         note="uniform and range (Kafka also accepts other assignor classes)"),
    _key("group.consumer.migration.policy", "string", "bidirectional", (
         "[disabled, upgrade, downgrade, bidirectional] (case-insensitive)",
         lambda v: None if v is None or str(v).lower() in ("disabled", "upgrade", "downgrade", "bidirectional")
         else "String must be one of (case-insensitive): DISABLED, UPGRADE, DOWNGRADE, BIDIRECTIONAL"),
         "Online migration between classic and consumer groups: upgrade converts a classic group with members "
         "when a consumer-protocol member joins it, downgrade converts a consumer group back when its last "
         "consumer-protocol member leaves and classic members remain, bidirectional allows both, disabled neither "
         "(an empty group converts on its first join of the other protocol under every policy)."),
    _key("group.consumer.regex.refresh.interval.ms", "int", 600000, _at_least(10000),
         "How old a consumer group's resolution of its subscription regexes may get before a member's heartbeat "
         "resolves them again (Kafka: an internal key).",
         note="used with an authorizer only, where a group's regexes resolve to the topics a member may DESCRIBE "
         "and a later ACL change reaches the assignment at the next resolution; without one, a regex is resolved "
         "again at every topic change, exactly"),
    # -- share groups: the group coordinator (Kafka's GroupCoordinatorConfig)
    _key("group.share.max.size", "int", 200, _between(1, 1000),
         "Most members a share group may have; a join beyond it gets GROUP_MAX_SIZE_REACHED."),
    _key("group.share.session.timeout.ms", "int", 45000, _at_least(1),
         "Default share.session.timeout.ms: a member that does not heartbeat for this long is removed."),
    _key("group.share.min.session.timeout.ms", "int", 45000, _at_least(1), "Lowest share.session.timeout.ms a group may set."),
    _key("group.share.max.session.timeout.ms", "int", 60000, _at_least(1), "Highest share.session.timeout.ms a group may set."),
    _key("group.share.heartbeat.interval.ms", "int", 5000, _at_least(1),
         "Default share.heartbeat.interval.ms: how often members are told to heartbeat."),
    _key("group.share.min.heartbeat.interval.ms", "int", 5000, _at_least(1),
         "Lowest share.heartbeat.interval.ms a group may set."),
    _key("group.share.max.heartbeat.interval.ms", "int", 15000, _at_least(1),
         "Highest share.heartbeat.interval.ms a group may set."),
    _key("group.share.assignors", "list", ["simple"], _share_assignors(),
         "The share group assignor (exactly one).", note="only simple (Kafka also accepts an assignor class)"),
    _key("group.share.assignment.interval.ms", "int", 1000, _at_least(0),
         "Default share.assignment.interval.ms: least time between two target assignments of a group (KIP-1263).",
         CLUSTER_WIDE),
    _key("group.share.min.assignment.interval.ms", "int", 0, _at_least(0),
         "Lowest share.assignment.interval.ms a group may set."),
    _key("group.share.max.assignment.interval.ms", "int", 15000, _at_least(0),
         "Highest share.assignment.interval.ms a group may set."),
    _key("group.share.assignor.offload.enable", "boolean", True, _any(),
         "Default share.assignor.offload.enable: run the assignor on a background thread.", CLUSTER_WIDE,
         note=_NO_EFFECT + " (the assignor runs on the event loop)"),
    _key("group.share.initialize.retry.interval.ms", "int", 30000, _at_least(1),
         "Wait before the coordinator retries initialising the state of share partitions.",
         note=_NO_EFFECT + " (share partition state is initialised in-process)"),
    _key("errors.deadletterqueue.auto.create.topics.enable", "boolean", False, _any(),
         "Create a share group's dead-letter queue topic when it does not exist (KIP-1191).", CLUSTER_WIDE),
    _key("errors.deadletterqueue.topic.name.prefix", "string", "dlq.", _any(),
         "Prefix every dead-letter queue topic name must have; empty allows any name (KIP-1191).", CLUSTER_WIDE),
    # -- share groups: share partitions (Kafka's ShareGroupConfig)
    _key("group.share.delivery.count.limit", "int", 5, _between(2, 10),
         "Default share.delivery.count.limit: delivery attempts before a record is archived."),
    _key("group.share.min.delivery.count.limit", "int", 2, _between(2, 5),
         "Lowest share.delivery.count.limit a group may set."),
    _key("group.share.max.delivery.count.limit", "int", 10, _between(5, 25),
         "Highest share.delivery.count.limit a group may set."),
    _key("group.share.record.lock.duration.ms", "int", 30000, _between(1000, 3600000),
         "Default share.record.lock.duration.ms: how long an acquired record stays locked to its member."),
    _key("group.share.min.record.lock.duration.ms", "int", 15000, _between(1000, 30000),
         "Lowest share.record.lock.duration.ms a group may set."),
    _key("group.share.max.record.lock.duration.ms", "int", 60000, _between(30000, 3600000),
         "Highest share.record.lock.duration.ms a group may set."),
    _key("group.share.partition.max.record.locks", "int", 2000, _between(100, 10000),
         "Default share.partition.max.record.locks: most records in flight in one share partition."),
    _key("group.share.min.partition.max.record.locks", "int", 100, _between(100, 2000),
         "Lowest share.partition.max.record.locks a group may set."),
    _key("group.share.max.partition.max.record.locks", "int", 4000, _between(2000, 10000),
         "Highest share.partition.max.record.locks a group may set."),
    _key("group.share.max.share.sessions", "int", 2000, _at_least(1),
         "Most share sessions the broker keeps; at least group.share.max.size."),
    _key("share.fetch.purgatory.purge.interval.requests", "int", 1000, _any(),
         "Requests between two purges of the share fetch purgatory.",
         note=_NO_EFFECT + " (parked share fetches are removed as they complete)"),
    # -- transactions: the transaction coordinator (Kafka's TransactionStateManagerConfig, TransactionLogConfig)
    _key("transaction.state.log.num.partitions", "int", 50, _at_least(1),
         "Partition count of __transaction_state; fixed once the topic exists."),
    _key("transaction.state.log.segment.bytes", "int", 104857600, _at_least(1048576),
         "Segment size of the __transaction_state partitions."),
    _key("transaction.state.log.load.buffer.size", "int", 5242880, _at_least(1),
         "Bytes read at a time while replaying __transaction_state on start-up."),
    _key("transaction.max.timeout.ms", "int", 900000, _at_least(1),
         "Longest transaction.timeout.ms a producer may ask for in InitProducerId; a longer one gets "
         "INVALID_TRANSACTION_TIMEOUT."),
    _key("transactional.id.expiration.ms", "int", 604800000, _at_least(1),
         "How long a transactional id may stay idle (no transaction) before the coordinator forgets it."),
    _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, _at_least(1),
         "How often transactions running past their timeout are aborted."),
    _key("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, _at_least(1),
         "How often transactional ids idle past transactional.id.expiration.ms are removed."),
    # -- share groups: the share coordinator (Kafka's ShareCoordinatorConfig)
    _key("share.coordinator.state.topic.num.partitions", "int", 50, _at_least(1),
         "Partition count of __share_group_state; never change it once the topic exists."),
    _key("share.coordinator.state.topic.segment.bytes", "int", 104857600, _at_least(1048576),
         "Segment size of the __share_group_state partitions.",
         note="at least 1048576 (Kafka: at least 1, but its state topic then cannot be created, segment.bytes "
              "having a 1 MiB minimum): refused at start-up instead"),
    _key("share.coordinator.state.topic.compression.codec", "int", 0, _between(0, 4),
         "Compression codec id of the records written to __share_group_state.",
         note="only 0 (none): the share coordinator writes uncompressed batches"),
    _key("share.coordinator.threads", "int", 1, _at_least(1), "Threads of the share coordinator.",
         note=_NO_EFFECT + " (the share coordinator runs on the event loop)"),
    _key("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, _between(0, 500),
         "ShareUpdate records written for a share partition before the next ShareSnapshot."),
    _key("share.coordinator.write.timeout.ms", "int", 5000, _at_least(1),
         "How long a write to __share_group_state may take before it fails.",
         note=_NO_EFFECT + " (a write to the local log completes or fails with the disk)"),
    _key("share.coordinator.load.buffer.size", "int", 5242880, _at_least(1),
         "Bytes read at a time while replaying __share_group_state on start-up."),
    _key("share.coordinator.append.linger.ms", "int", -1, _at_least(-1),
         "Linger before appending a batch of share-state records; -1 adapts.",
         note=_NO_EFFECT + " (records of concurrent writes are batched while the previous write is in flight)"),
    _key("share.coordinator.state.topic.prune.interval.ms", "int", 300000, _at_least(1),
         "How often records before the latest snapshots are pruned from __share_group_state."),
    _key("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300000, _at_least(1),
         "How often share partitions with no recent write get a fresh ShareSnapshot, so older records can be pruned."),
    _key("share.coordinator.cached.buffer.max.bytes", "int", 1048588, _at_least(524288),
         "Largest buffer the share coordinator keeps cached for appends (KIP-1196).", CLUSTER_WIDE,
         note=_NO_EFFECT),
    _key("group.share.persister.class.name", "string", "org.apache.kafka.server.share.persister.DefaultStatePersister",
         _any(), "Class that persists share partition state (internal).",
         note=_NO_EFFECT + " (quafka persists share state itself)"),
    # -- quotas and connection limits (server/quotas.py, server/connection_limits.py, docs/security.md)
    _key("quota.window.num", "int", 11, _at_least(1),
         "Number of samples a client quota's rate is measured over (Kafka's ClientQuotaManagerConfig)."),
    _key("quota.window.size.seconds", "int", 1, _at_least(1), "Length of each client quota sample, in seconds."),
    _key("quafka.quota.burst.windows", "int", 0, _at_least(0),
         "The least time a client quota's rate is measured over, in samples: a client starting from nothing may "
         "send this many samples' worth of its quota at once. 0 (off) is Kafka's arithmetic, quota.window.num - 1 "
         "samples, whose ten-second burst returns every time it leaves the window; 1 holds a greedy client "
         "within a few percent of its quota over any 20 seconds.",
         note="a quafka extension, off by default (Kafka measures over at least quota.window.num - 1 samples: "
         "Rate.windowSize; docs/security.md)"),
    _key("max.connections", "int", 2147483647, _at_least(0),
         "Most client connections the broker holds open; listener.name.<listener>.max.connections limits one "
         "listener. A connection past it is closed at once.", CLUSTER_WIDE),
    _key("max.connections.per.ip", "int", 2147483647, _at_least(0),
         "Most connections from one IP address; a connection past it is closed at once.", CLUSTER_WIDE),
    _key("max.connections.per.ip.overrides", "string", "", _connection_overrides(),
         "Per-host exceptions to max.connections.per.ip, as host:count,host:count (an IP address or a host name).",
         CLUSTER_WIDE),
    _key("connections.max.idle.ms", "long", 600000, _at_least(-1),
         "A connection that has sent nothing and has no request in flight for this long is closed; -1 never."),
    # -- TLS (Kafka's SslConfigs and BrokerSecurityConfigs; every key also per listener as
    # listener.name.<listener>.<key>; loaded and checked as a whole by _ssl_config and server/tls.py)
    *_SSL_KEYS,
    # -- SASL (docs/security.md "SASL"; Kafka's BrokerSecurityConfigs and SaslConfigs)
    _key("sasl.enabled.mechanisms", "list", list(DEFAULT_SASL_MECHANISMS), _sasl_mechanisms(),
         "The SASL mechanisms a SASL_PLAINTEXT or SASL_SSL listener offers in its SaslHandshake response; a "
         "listener may have its own (listener.name.<listener>.sasl.enabled.mechanisms).",
         note="default SCRAM-SHA-256,SCRAM-SHA-512 (Kafka: GSSAPI, which quafka does not serve); PLAIN, "
              "SCRAM-SHA-256 and SCRAM-SHA-512 only; read-only (Kafka: per-broker)"),
    _key("sasl.jaas.config", "password", None, _jaas_config(),
         "JAAS login module of a SASL listener, as listener.name.<listener>.<mechanism>.sasl.jaas.config: for "
         "PLAIN, org.apache.kafka.common.security.plain.PlainLoginModule with one user_<name>=\"<password>\" "
         "option per user; for SCRAM, org.apache.kafka.common.security.scram.ScramLoginModule (its options are "
         "not used: SCRAM credentials live in the metadata journal).",
         note="also accepted unprefixed, as the default of every SASL listener and mechanism whose login module "
              "it names (Kafka ignores an unprefixed one with a warning); a SCRAM mechanism needs none (Kafka "
              "needs one per mechanism); read-only"),
    _key("sasl.server.max.receive.size", "int", 524288, _at_least(1),
         "Largest request accepted before a SASL connection has authenticated; a larger one closes the "
         "connection."),
    _key("connections.max.reauth.ms", "long", 0, _at_least(0),
         "Longest a SASL session lasts before the client must re-authenticate (SaslAuthenticate v1+ tells the "
         "client; a connection that sends anything else after it closes); 0 means sessions never expire. May be "
         "set per listener (listener.name.<listener>.connections.max.reauth.ms)."),
    _key("connection.failed.authentication.delay.ms", "int", 100, _at_least(0),
         "How long the answer to a failed authentication is held back before the connection closes, to slow "
         "down password guessing; 0 answers and closes at once."),
    # -- metrics
    _key("metrics.listener", "string", "", _metrics_listener(),
         "Where the broker serves its metrics in the Prometheus text format (GET /metrics), as http://host:port; "
         "port 0 picks a free port; empty turns metrics off. See docs/metrics.md.",
         note="quafka only (Kafka exposes JMX MBeans, usually scraped through the JMX exporter)"),
    # -- quafka's API extension (protocol/extensions.py; docs/protocol.md "quafka's API extension")
    _key("quafka.api.extension.enable", "boolean", True, _any(),
         "Serve quafka's API extension (QuafkaDescribeInFlight 32000, QuafkaAlterInFlight 32001: the in-flight "
         "view and force actions). false: ApiVersions does not list them and a request for them is treated as "
         "an unknown API key (the connection is closed, as Apache Kafka does), so clients see a broker without "
         "the extension, as they see Apache Kafka.",
         note="a quafka extension, not in Kafka; on by default"),
    # -- the web dashboard (docs/dashboard.md), started by `quafka broker` (cli/broker.py)
    _key("quafka.dashboard.listener", "string", "", _dashboard_listener(),
         "Where the broker process serves the web dashboard, as http://host:port (port 0 picks a free port); "
         "empty turns it off. The dashboard is a client of this broker: see quafka.dashboard.client.config. "
         "Bound beyond loopback, anyone who reaches it reads as the dashboard's login (a warning is logged). "
         "See docs/dashboard.md.",
         note=_DASHBOARD_EXTENSION),
    _key("quafka.dashboard.actions.enable", "boolean", False, _any(),
         "Whether the dashboard offers its actions (redrive dead letters, force release or archive in-flight "
         "records), each behind a confirmation page with a dry run; false: read-only, every action URL answers "
         "403.", note=_DASHBOARD_EXTENSION),
    _key("quafka.dashboard.client.config", "string", "", _any(),
         "A client properties file (as the tools' --command-config: security.protocol, sasl.*, ssl.*) the "
         "dashboard logs in with; every page and action is then authorized as that principal. Empty: it connects "
         "to the broker's first PLAINTEXT listener (the broker refuses to start with the dashboard on, no "
         "PLAINTEXT listener and no file).", note=_DASHBOARD_EXTENSION),
    _key("quafka.dashboard.worker.metrics.urls", "list", [], _worker_metrics_urls(),
         "The /metrics URLs of quafka.framework workers (`quafka worker --metrics-port`), comma-separated, "
         "that the dashboard's workers page scrapes (as `quafka dashboard --worker-metrics URL`); empty: the "
         "page says none is configured.", note=_DASHBOARD_EXTENSION),
]

BROKER_KEYS: dict[str, ConfigKey] = {k.name: k for k in _BROKER}

# --------------------------------------------------------------------------- topic keys

# Topic config -> the broker keys that give its default, in Kafka's order of precedence
# (ServerTopicConfigSynonyms); only broker keys that quafka serves are listed.
TOPIC_SYNONYMS: dict[str, tuple[str, ...]] = {k.topic_synonym: (k.name,) for k in _BROKER if k.topic_synonym}
TOPIC_SYNONYMS.update({
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
})


def _t(name: str, type_: str, default: Any, check: tuple[str, Check], doc: str, note: str = "") -> ConfigKey:
    return _key(name, type_, default, check, doc, PER_TOPIC, note=note, broker_synonyms=TOPIC_SYNONYMS.get(name, ()))


_NO_REMOTE = "quafka has no tiered storage"

_TOPIC = [
    _t("cleanup.policy", "list", ["delete"], _cleanup_policy(),
       "delete removes old segments by retention; compact keeps the latest record of each key; both do both; "
       "an empty value keeps data forever."),
    _t("compression.type", "string", "producer", _compression_type(),
       "Codec the topic's batches are stored with: producer keeps each batch's own codec; any other value "
       "makes the broker rewrite batches sent with another codec into this one (docs/storage.md)."),
    _t("compression.gzip.level", "int", -1, _gzip_level(),
       "Gzip level the broker compresses at when it rewrites a batch into gzip (-1: level 6)."),
    _t("compression.lz4.level", "int", 9, _between(1, 17),
       "LZ4 level the broker compresses at when it rewrites a batch into lz4."),
    _t("compression.zstd.level", "int", 3, _between(-131072, 22),
       "Zstd level the broker compresses at when it rewrites a batch into zstd."),
    _t("delete.retention.ms", "long", 86400000, _at_least(0), "How long a tombstone stays after the cleaning that first saw it."),
    _t("errors.deadletterqueue.group.enable", "boolean", False, _any(),
       "Let share groups use this topic as their dead-letter queue (KIP-1191); a DLQ topic must opt in."),
    _t("file.delete.delay.ms", "long", 60000, _at_least(0), "Wait before a deleted segment's files are removed.",
       note=_NO_EFFECT + " (segments are removed at once)"),
    _t("flush.messages", "long", MAX_LONG, _at_least(1), "fsync after this many unflushed records."),
    _t("flush.ms", "long", MAX_LONG, _at_least(0), "fsync when the oldest unflushed append is this old."),
    _t("follower.replication.throttled.replicas", "list", [], _throttled_replicas(),
       "Replicas whose follower fetching is throttled.", note=_NO_EFFECT + " (there are no followers)"),
    _t("index.interval.bytes", "int", 4096, _at_least(0), "Bytes of batches between two offset index entries."),
    _t("leader.replication.throttled.replicas", "list", [], _throttled_replicas(),
       "Replicas whose leader-side replication is throttled.", note=_NO_EFFECT + " (there are no followers)"),
    _t("local.retention.bytes", "long", -2, _at_least(-2),
       "Local size limit when tiered storage is on; -2 = retention.bytes.",
       note=_NO_EFFECT + " (no tiered storage)"),
    _t("local.retention.ms", "long", -2, _at_least(-2), "Local age limit when tiered storage is on; -2 = retention.ms.",
       note=_NO_EFFECT + " (no tiered storage)"),
    _t("max.compaction.lag.ms", "long", MAX_LONG, _at_least(1), "Longest a record may stay uncompacted once its segment is rolled."),
    _t("max.message.bytes", "int", 1048588, _at_least(0), "Largest record batch accepted by produce."),
    _t("message.timestamp.after.max.ms", "long", 3600000, _at_least(0),
       "How far in the future a CreateTime timestamp may be."),
    _t("message.timestamp.before.max.ms", "long", MAX_LONG, _at_least(0),
       "How far in the past a CreateTime timestamp may be."),
    _t("message.timestamp.type", "string", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
       "Keep the producer's timestamps (CreateTime) or stamp the append time (LogAppendTime)."),
    _t("min.cleanable.dirty.ratio", "double", 0.5, _between(0, 1), "Dirty share of the log that triggers compaction."),
    _t("min.compaction.lag.ms", "long", 0, _at_least(0), "Shortest a record stays uncompacted."),
    _t("min.insync.replicas", "int", 1, _at_least(1), "Replicas that must hold a write acknowledged with acks=all.",
       note="one node: the ISR is always this broker alone, so acks=all waits for nothing more"),
    _t("preallocate", "boolean", False, _any(), "Preallocate segment files on creation.", note=_NO_EFFECT),
    _t("remote.log.copy.disable", "boolean", False, _any(), "Stop copying segments to tiered storage.",
       note=_NO_EFFECT + " (no tiered storage)"),
    _t("remote.log.delete.on.disable", "boolean", False, _any(),
       "Delete tiered data when tiered storage is turned off.",
       note=_NO_EFFECT + " (no tiered storage)"),
    _t("remote.storage.enable", "boolean", False, _false_only(_NO_REMOTE), "Keep older segments in tiered storage.",
       note="only false: " + _NO_REMOTE),
    _t("retention.bytes", "long", -1, _any(), "Partition size above which old segments are deleted; -1 = unlimited."),
    _t("retention.ms", "long", 604800000, _at_least(-1), "Age after which old segments are deleted; -1 = unlimited."),
    _t("segment.bytes", "int", 1073741824, _at_least(1048576), "Size at which a segment is rolled."),
    _t("segment.index.bytes", "int", 10485760, _at_least(4), "Largest offset index of one segment.", note=_NO_EFFECT),
    _t("segment.jitter.ms", "long", 0, _at_least(0), "Random jitter subtracted from the roll age.", note=_NO_EFFECT),
    _t("segment.ms", "long", 604800000, _at_least(1), "Age at which a non-empty segment is rolled."),
    _t("unclean.leader.election.enable", "boolean", False, _any(), "Let an out-of-sync replica become leader.",
       note=_NO_EFFECT + " (one replica, always in sync)"),
]

TOPIC_KEYS: dict[str, ConfigKey] = {k.name: k for k in _TOPIC}

# --------------------------------------------------------------------------- group keys


def _g(name: str, type_: str, default: Any, check: tuple[str, Check], doc: str, synonym: str | None = None,
       note: str = "") -> ConfigKey:
    return _key(name, type_, default, check, doc, PER_GROUP, note=note, broker_synonyms=(synonym,) if synonym else ())



_WEEK_MS = 7 * 86_400_000
_EXTENSION = "a quafka extension, not in Kafka; off by default"

# Kafka's GroupConfig keys for share groups (kafka-configs.sh --entity-type groups). A key with a
# broker synonym takes its default from that broker key and must lie within the broker's bounds.
_GROUP = [
    _g("consumer.session.timeout.ms", "int", 45000, _at_least(1),
       "A consumer group member that does not heartbeat for this long is removed from the group.",
       "group.consumer.session.timeout.ms"),
    _g("consumer.heartbeat.interval.ms", "int", 5000, _at_least(1),
       "How often consumer group members are told to heartbeat.", "group.consumer.heartbeat.interval.ms"),
    _g("share.session.timeout.ms", "int", 45000, _at_least(1),
       "A member that does not heartbeat for this long is removed from the group.", "group.share.session.timeout.ms"),
    _g("share.heartbeat.interval.ms", "int", 5000, _at_least(1), "How often members are told to heartbeat.",
       "group.share.heartbeat.interval.ms"),
    _g("share.record.lock.duration.ms", "int", 30000, _at_least(1000),
       "How long an acquired record stays locked to its member.", "group.share.record.lock.duration.ms"),
    _g("share.auto.offset.reset", "string", "latest", _auto_offset_reset(),
       "Where a share partition new to the group starts: latest, earliest, or by_duration:<ISO-8601 duration> "
       "(the first record at or after now minus the duration)."),
    _g("share.isolation.level", "string", "read_uncommitted", _one_of("read_committed", "read_uncommitted"),
       "read_committed delivers only committed transactional records; read_uncommitted delivers everything."),
    _g("share.delivery.count.limit", "int", 5, _at_least(2), "Delivery attempts before a record is archived.",
       "group.share.delivery.count.limit"),
    _g("share.partition.max.record.locks", "int", 2000, _at_least(100),
       "Most records in flight in one share partition of the group.", "group.share.partition.max.record.locks"),
    _g("share.renew.acknowledge.enable", "boolean", True, _any(),
       "Whether RENEW acknowledgements are allowed; when false a RENEW gets INVALID_RECORD_STATE."),
    _g("share.assignment.interval.ms", "int", 1000, _at_least(0),
       "Least time between two target assignments of the group (KIP-1263).", "group.share.assignment.interval.ms"),
    _g("share.assignor.offload.enable", "boolean", True, _any(), "Run the assignor on a background thread.",
       "group.share.assignor.offload.enable", note=_NO_EFFECT + " (the assignor runs on the event loop)"),
    _g("errors.deadletterqueue.topic.name", "string", "", _any(),
       "The group's dead-letter queue topic; empty means no DLQ. Must not start with __."),
    _g("errors.deadletterqueue.copy.record.enable", "boolean", False, _any(),
       "Copy the original record's key and value onto the DLQ topic (false: headers only)."),
    # quafka's own delivery controls (docs/share-groups.md, "Extensions"): off by default, and then
    # a share group behaves exactly as Kafka's
    _g("quafka.share.redelivery.backoff.ms", "long", 0, _in_range(0, _WEEK_MS),
       "First redelivery delay: a record that becomes available again (RELEASE, lock expiry, a member leaving) "
       "is not delivered again for this long; 0 = no backoff.", note=_EXTENSION),
    _g("quafka.share.redelivery.backoff.max.ms", "long", 3_600_000, _in_range(1, _WEEK_MS),
       "Longest redelivery delay: first × multiplier^(deliveries − 1) is capped here; at least "
       "quafka.share.redelivery.backoff.ms.", note=_EXTENSION),
    _g("quafka.share.redelivery.backoff.multiplier", "double", 2.0, _in_range(1.0, 100.0),
       "Factor between one redelivery delay and the next (1.0: a fixed delay).", note=_EXTENSION),
    _g("quafka.share.redelivery.backoff.jitter", "double", 0.0, _in_range(0.0, 1.0),
       "Each redelivery delay varies by up to ± this fraction (stable per record and delivery).", note=_EXTENSION),
    _g("quafka.share.delivery.delay.enable", "boolean", False, _any(),
       "Honour the record headers quafka.deliver.after.ms (after the record's timestamp) and quafka.deliver.at.ms "
       "(epoch ms): such a record is not delivered before that time.", note=_EXTENSION),
    _g("quafka.share.delivery.delay.max.ms", "long", _WEEK_MS, _in_range(1, 365 * 86_400_000),
       "Delivery times further ahead than this are capped to it (a mistaken header cannot park a record for "
       "years).", note=_EXTENSION),
    _g("quafka.share.key.ordering", "boolean", False, _any(),
       "At most one record per key in flight in a share partition, delivered in offset order; records of other "
       "keys (and without a key) flow in parallel.", note=_EXTENSION),
    _g("quafka.share.key.ordering.on.failure", "string", "continue", _one_of("continue", "park", "dead-letter"),
       "When a record of a key is rejected or reaches the delivery limit: continue (the key's later records "
       "flow), park (they wait until an operator releases the key), dead-letter (they follow it to the DLQ "
       "until released). Needs quafka.share.key.ordering=true.", note=_EXTENSION),
]

GROUP_KEYS: dict[str, ConfigKey] = {k.name: k for k in _GROUP}

# --------------------------------------------------------------------------- ignored and refused keys

_ONE_NODE_RF = "one node: every partition of the internal topics has exactly one replica"
_THREADS = "quafka serves everything from one asyncio event loop; Kafka's thread pool sizes do not apply"
_NO_KRAFT = "quafka is a single node with no KRaft controller quorum"
_NO_PEERS = "one node: there are no follower replicas and no other brokers"

# Kafka broker keys that mean nothing on one quafka node: accepted, each logged as one warning line.
IGNORED_KEYS: dict[str, str] = {
    "process.roles": "quafka is always one combined node; there are no roles to assign",
    "controller.quorum.voters": _NO_KRAFT,
    "controller.quorum.bootstrap.servers": _NO_KRAFT,
    "controller.listener.names": _NO_KRAFT + " (listeners with these names are not served)",
    "inter.broker.listener.name": "one node: there are no other brokers to talk to",
    "sasl.mechanism.inter.broker.protocol": "one node: there are no other brokers to authenticate to",
    "sasl.mechanism.controller.protocol": _NO_KRAFT,
    "default.replication.factor": "one node: every partition has exactly one replica",
    "offsets.topic.replication.factor": _ONE_NODE_RF,
    "transaction.state.log.replication.factor": _ONE_NODE_RF,
    "transaction.state.log.min.isr": _ONE_NODE_RF,
    "share.coordinator.state.topic.replication.factor": _ONE_NODE_RF,
    "share.coordinator.state.topic.min.isr": _ONE_NODE_RF,
    "unclean.leader.election.enable": "one node: there is never another replica to elect",
    "num.network.threads": _THREADS,
    "num.io.threads": _THREADS,
    "num.replica.fetchers": _THREADS,
    "num.recovery.threads.per.data.dir": _THREADS,
    "num.replica.alter.log.dirs.threads": _THREADS,
    "background.threads": _THREADS,
    "socket.send.buffer.bytes": "quafka leaves socket buffer sizes to the operating system",
    "socket.receive.buffer.bytes": "quafka leaves socket buffer sizes to the operating system",
    "metadata.log.dir": _NO_KRAFT + " and keeps no metadata log",
    "metric.reporters": "quafka has no JMX metrics or metric reporter plugins",
    "auto.leader.rebalance.enable": "one node leads every partition",
    "broker.rack": "one node: there is nothing to spread across racks",
    "broker.id.generation.enable": "the node id comes from node.id",
    "reserved.broker.max.id": "the node id comes from node.id",
    "unstable.api.versions.enable": "quafka advertises exactly the API versions it implements",
    "unstable.feature.versions.enable": "quafka advertises exactly the features it implements",
    "group.share.enable": "share groups are always enabled in quafka (Kafka removed this key in 4.3)",
    "queued.max.requests": "quafka has no queue between its network and request threads: one event loop serves each "
    "request as it is read, and a connection reads its next request only once the previous one is answered",
    "log.local.retention.ms": _NO_REMOTE,
    "log.local.retention.bytes": _NO_REMOTE,
}

# Key prefixes ignored the same way (each key still gets its own warning line).
IGNORED_PREFIXES: dict[str, str] = {
    "controller.": _NO_KRAFT,
    "replica.": _NO_PEERS,
    "leader.imbalance.": "one node leads every partition",
    "controlled.shutdown.": "one node: there is no controller to move leadership to",
    "metadata.": _NO_KRAFT + " and keeps no metadata log",
    "metrics.": "quafka has no JMX metrics or metric reporter plugins (metrics.listener serves Prometheus metrics)",
    "kafka.metrics.": "quafka has no JMX metrics or metric reporter plugins",
    "remote.log.": _NO_REMOTE,
    "zookeeper.": "Kafka 4 and quafka run without ZooKeeper",
}

_PLAINTEXT_ONLY = "quafka serves PLAINTEXT only, with no authentication or authorization"

# Keys refused with a specific reason (a ConfigError), rather than the generic unknown-key one.
_REFUSED_KEYS: dict[str, str] = {
    "principal.builder.class": _PLAINTEXT_ONLY,
    "security.inter.broker.protocol": _PLAINTEXT_ONLY,
    "max.connection.creation.rate": "quafka does not limit the rate of new connections (max.connections and "
    "max.connections.per.ip bound how many are open)",
    "create.topic.policy.class.name": "quafka cannot load Java policy classes",
    "alter.config.policy.class.name": "quafka cannot load Java policy classes",
    "log.message.format.version": "removed in Kafka 4.0",
    "log.message.downconversion.enable": "removed in Kafka 4.0",
    "log.message.timestamp.difference.max.ms": "removed in Kafka 4.0; use log.message.timestamp.before.max.ms "
    "and log.message.timestamp.after.max.ms",
    "message.downconversion.enable": "removed in Kafka 4.0",
    "message.format.version": "removed in Kafka 4.0",
    "message.timestamp.difference.max.ms": "removed in Kafka 4.0; use message.timestamp.before.max.ms and "
    "message.timestamp.after.max.ms",
}
_NO_JAVA_CLASSES = ("quafka cannot load Java classes: PLAIN users come from the JAAS config's user_<name> options "
                    "and SCRAM credentials from the metadata journal")
_REFUSED_PREFIXES: dict[str, str] = {
    "sasl.kerberos.": _UNSERVED_MECHANISMS["GSSAPI"],
    "sasl.oauthbearer.": _UNSERVED_MECHANISMS["OAUTHBEARER"],
    "sasl.login.": "the broker logs in nowhere (one node: no inter-broker client) and " + _NO_JAVA_CLASSES,
    "sasl.server.callback.handler.class": _NO_JAVA_CLASSES,
    "sasl.client.callback.handler.class": _NO_JAVA_CLASSES,
    "sasl.": "not a SASL setting quafka serves (it serves sasl.enabled.mechanisms, sasl.jaas.config and "
             "sasl.server.max.receive.size; see docs/security.md)",
}


def ignored_reason(name: str) -> str | None:
    """Why quafka ignores this broker key, or None if it is not an ignored key."""
    if name in IGNORED_KEYS:
        return IGNORED_KEYS[name]
    for prefix, reason in IGNORED_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None


def rejected_reason(name: str) -> str | None:
    """A specific reason to refuse a key that is neither served nor ignored, or None."""
    if name in _REFUSED_KEYS:
        return _REFUSED_KEYS[name]
    for prefix, reason in _REFUSED_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None


# --------------------------------------------------------------------------- generated documentation


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|")


def _default_text(key: ConfigKey) -> str:
    rendered = key.render(key.default)
    return "null" if rendered is None else (f"`{rendered}`" if rendered else '`""`')


def markdown_tables() -> dict[str, str]:
    """The generated sections of docs/configuration.md, by marker name."""
    broker = ["| Key | Type | Default | Valid values | Dynamic | Meaning |", "|---|---|---|---|---|---|"]
    for key in sorted(BROKER_KEYS.values(), key=lambda k: k.name):
        meaning = key.doc + (f" *quafka: {key.note}.*" if key.note else "")
        broker.append(f"| `{key.name}` | {key.type} | {_cell(_default_text(key))} | {_cell(key.validator or 'any')} | "
                      f"{key.dynamic} | {_cell(meaning)} |")
    ignored = ["| Key | Why quafka ignores it |", "|---|---|"]
    ignored += [f"| `{name}` | {_cell(reason)} |" for name, reason in sorted(IGNORED_KEYS.items())]
    ignored += [f"| `{prefix}*` (any key) | {_cell(reason)} |" for prefix, reason in sorted(IGNORED_PREFIXES.items())]
    topic = ["| Key | Type | Default | Valid values | Broker default from | Meaning |", "|---|---|---|---|---|---|"]
    for key in sorted(TOPIC_KEYS.values(), key=lambda k: k.name):
        meaning = key.doc + (f" *quafka: {key.note}.*" if key.note else "")
        origin = ", ".join(f"`{s}`" for s in key.broker_synonyms) or "-"
        topic.append(f"| `{key.name}` | {key.type} | {_cell(_default_text(key))} | {_cell(key.validator or 'any')} | "
                     f"{origin} | {_cell(meaning)} |")
    group = ["| Key | Type | Default | Valid values | Broker default from | Meaning |", "|---|---|---|---|---|---|"]
    for key in sorted(GROUP_KEYS.values(), key=lambda k: k.name):
        meaning = key.doc + (f" *quafka: {key.note}.*" if key.note else "")
        origin = ", ".join(f"`{s}`" for s in key.broker_synonyms) or "-"
        group.append(f"| `{key.name}` | {key.type} | {_cell(_default_text(key))} | {_cell(key.validator or 'any')} | "
                     f"{origin} | {_cell(meaning)} |")
    return {"broker-keys": "\n".join(broker), "ignored-keys": "\n".join(ignored), "topic-keys": "\n".join(topic),
            "group-keys": "\n".join(group)}


def render_docs(text: str) -> str:
    """`text` with every `<!-- BEGIN generated:NAME -->` ... `<!-- END generated:NAME -->` section replaced."""
    for name, table in markdown_tables().items():
        begin, end = f"<!-- BEGIN generated:{name} -->", f"<!-- END generated:{name} -->"
        head, sep, rest = text.partition(begin)
        _, sep2, tail = rest.partition(end)
        if not sep or not sep2:
            raise ValueError(f"markers for {name} not found")
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    return text
