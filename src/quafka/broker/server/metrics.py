"""Broker metrics: counters kept where events happen, rendered in the Prometheus text format 0.0.4
and served over HTTP on `metrics.listener` (`http://HOST:PORT`; empty means off).

Names follow what the Prometheus JMX exporter makes of Kafka's MBeans with the rules most Kafka
deployments use (the jmx_exporter / Strimzi `kafka-metrics` rules, `lowercaseOutputName: true`,
`lowercaseOutputLabelNames: true`), so dashboards and alerts written for Kafka's share-group
metrics find the same series here:

- Yammer meters `kafka.<domain>:type=T,name=XPerSec,k=v` (attribute Count) become the counter
  `kafka_<domain>_<t>_<x>_total{k="v"}` (PerSec dropped, lowercase);
- Yammer gauges `kafka.<domain>:type=T,name=X,k=v` (attribute Value) become the gauge
  `kafka_<domain>_<t>_<x>{k="v"}`;
- Yammer histograms and timers (`...Ms`) become a Prometheus histogram of that name
  (`_bucket`/`_sum`/`_count`, in milliseconds; the exporter's `_count` keeps its meaning);
- Kafka Metrics beans `kafka.server:type=group-name,k=v` attribute `metric-name` become
  `kafka_server_<group_name>_<metric_name>{k="v"}` (the exporter's default naming).

What quafka adds has the prefix `quafka_`. docs/metrics.md maps every series to its Kafka name.

Hot-path cost: the broker code increments plain attributes of `BrokerMetrics` (no locks: every
update and every scrape runs on the broker's event loop); per-request latency is observed once per
request in connection.py. Gauges (in-flight windows, sessions, groups) are read from the broker's
state when scraped, costing nothing in between.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, Iterable, Protocol

from kio.schema.index import api_key_map

from quafka._exposition import CONTENT_TYPE, TextWriter
from quafka.broker._config_defs import parse_metrics_listener
from quafka.protocol.extensions import EXTENSION_API_NAMES

if TYPE_CHECKING:
    from quafka.broker.core.share_session import ShareSessionCache
    from quafka.broker.storage import LogDirHealth

log = logging.getLogger("quafka.metrics")

ACK_TYPE_NAMES = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}
GROUP_STATES = ("Empty", "Stable", "Dead")
CONSUMER_GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")  # ConsumerGroupState
CLASSIC_GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")

# Request latency buckets (ms), roughly logarithmic: sub-millisecond requests up to long polls.
LATENCY_BUCKETS_MS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
                      10000.0, 30000.0)
# Share-state writes and share-partition loads are cheaper (no long polls).
WRITE_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0)

def api_name(api_key: int) -> str:
    """Kafka's request name for an API key ("ShareFetch"), as in RequestMetrics' `request` tag."""
    snake = api_key_map.get(api_key) or EXTENSION_API_NAMES.get(api_key)
    if snake is None:
        return f"Unknown{api_key}"
    return "".join(part.capitalize() for part in snake.split("_"))


class Histogram:
    """Cumulative-on-render histogram: observe() is a bisect, two adds and an increment."""

    __slots__ = ("bounds", "counts", "sum", "count", "max")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.max = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1
        if value > self.max:
            self.max = value


class BrokerMetrics:
    """The broker's event counters. Plain attributes, incremented by the code where events happen."""

    def __init__(self) -> None:
        # RequestMetrics: {(api key, version): count}, {api key: latency histogram}
        self.requests: dict[tuple[int, int], int] = {}
        # requests by who sent them: (principal type, principal name, listener, API key) -> count
        self.requests_by_principal: dict[tuple[str, str, str, int], int] = {}
        self.request_time_ms: dict[int, Histogram] = {}
        # BrokerTopicMetrics (all topics)
        self.share_fetch_requests = 0
        self.share_fetch_failed = 0
        self.share_ack_requests = 0
        self.share_ack_failed = 0
        # records a completed ShareFetch acquired but never sent (its connection dropped first)
        self.share_fetch_unsent_returned = 0
        # ShareGroupMetrics: acknowledged records by ack type (index = wire type, 0 = GAP unused)
        self.acknowledgements = [0, 0, 0, 0, 0]
        self.partition_load_time_ms = Histogram(WRITE_BUCKETS_MS)
        # ShareGroupMetrics DLQ meters per group (Kafka 4.4): [records, produce requests, failed ones]
        self.dead_letters: dict[str, list[int]] = {}
        # share coordinator: writes (WriteShareGroupState and friends), their latency, load times
        self.share_state_writes = 0
        self.share_state_write_time_ms = Histogram(WRITE_BUCKETS_MS)
        self.share_state_partition_load_ms: list[float] = []
        # storage: failed log directories (LogManager), flush-scheduler errors that are not I/O
        self.log_dir_failures = 0
        self.flush_loop_errors = 0
        # group coordinator (GroupCoordinatorMetrics): committed, expired and deleted offsets
        self.offset_commits = 0
        self.offset_expirations = 0
        self.offset_deletions = 0
        # authorizer (authorizer.py; Kafka's authorizer-metrics of KIP-767)
        self.authorization_allowed = 0
        self.authorization_denied = 0
        self.authorizer_log_lines_suppressed = 0
        # TLS listeners (tls_accept.py): handshakes completed by listener, failed by (listener, reason)
        self.tls_handshakes: dict[str, int] = {}
        self.tls_handshake_failures: dict[tuple[str, str], int] = {}
        # SASL (Kafka's socket-server-metrics per listener): {(listener, outcome): count}, outcome one of
        # successful-authentication, failed-authentication, successful-reauthentication,
        # failed-reauthentication, expired-connections-killed
        self.sasl: dict[tuple[str, str], int] = {}

    def count_sasl(self, listener: str, outcome: str) -> None:
        key = (listener, outcome)
        self.sasl[key] = self.sasl.get(key, 0) + 1

    def count_dlq(self, group_id: str, *, records: int = 0, produce_requests: int = 0,
                  failed_produce_requests: int = 0) -> None:
        counts = self.dead_letters.get(group_id)
        if counts is None:  # registered on first use, as Kafka's per-group meters
            counts = self.dead_letters[group_id] = [0, 0, 0]
        counts[0] += records
        counts[1] += produce_requests
        counts[2] += failed_produce_requests

    def observe_request(self, api_key: int, api_version: int, elapsed_ms: float) -> None:
        key = (api_key, api_version)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        hist = self.request_time_ms.get(api_key)
        if hist is None:
            hist = self.request_time_ms[api_key] = Histogram(LATENCY_BUCKETS_MS)
        hist.observe(elapsed_ms)

    def count_acknowledgements(self, batches) -> None:
        """Acknowledged records by type, as Kafka's RecordAcknowledgementsPerSec counts them: a
        batch with one type counts its whole range, per-offset types count one each."""
        counts = self.acknowledgements
        for first, last, types in batches:
            if len(types) == 1:
                t = types[0]
                if 0 < t <= 4:
                    counts[t] += last - first + 1
            else:
                for t in types:
                    if 0 < t <= 4:
                        counts[t] += 1


# --------------------------------------------------------------------------- rendering


class MetricsSource(Protocol):
    """What `render` reads of the broker: its counters, and the services it asks for their sizes.
    The services (and the flusher) are typed loosely: they sit above this module, which they import
    for their counters, so naming their classes here would close an import cycle."""

    metrics: BrokerMetrics
    failed_log_dir: LogDirHealth | None
    share_sessions: ShareSessionCache
    flusher: Any  # flusher.LogFlusher
    share_partitions: Any  # share_partitions.SharePartitionManager
    share_coordinator: Any  # share_coordinator.ShareCoordinatorService | None
    share_groups: Any  # share_groups.ShareGroupService | None
    consumer_groups: Any  # consumer_groups.ConsumerGroupService | None
    classic_groups: Any  # classic_groups.ClassicGroupService | None
    consumer_offsets: Any  # consumer_offsets.ConsumerOffsetsService | None
    log_cleaner: Any  # log_cleaner.LogCleanerService | None
    authorizer: Any  # authorizer.StandardAuthorizer | None


def render(server: "MetricsSource") -> str:
    """Every metric of the broker in the Prometheus text format 0.0.4."""
    m: BrokerMetrics = server.metrics
    out = TextWriter()

    # ---- kafka.network:type=RequestMetrics
    out.family("kafka_network_requestmetrics_requests_total", "counter",
               "Requests served, by API and version (kafka.network:type=RequestMetrics,name=RequestsPerSec).",
               [((("request", api_name(k)), ("version", v)), n) for (k, v), n in sorted(m.requests.items())])
    out.family("quafka_requests_by_principal_total", "counter",
               "Requests answered, by the principal that sent them (User:ANONYMOUS without authentication), "
               "the listener they came in on and the API.",
               [((("principal", f"{t}:{n}"), ("listener", lst), ("request", api_name(k))), c)
                for (t, n, lst, k), c in sorted(m.requests_by_principal.items())])
    out.histogram("kafka_network_requestmetrics_totaltimems",
                  "Time from a request read to its response written, in ms "
                  "(kafka.network:type=RequestMetrics,name=TotalTimeMs).",
                  [((("request", api_name(k)),), h.bounds, h.counts, h.sum) for k, h in sorted(m.request_time_ms.items())])

    # ---- kafka.server:type=BrokerTopicMetrics (all topics)
    for kafka_name, value, what in (
        ("TotalShareFetchRequests", m.share_fetch_requests, "ShareFetch requests"),
        ("FailedShareFetchRequests", m.share_fetch_failed, "ShareFetch requests that failed (any error)"),
        ("TotalShareAcknowledgementRequests", m.share_ack_requests,
         "Requests carrying acknowledgements (ShareAcknowledge, ShareFetch with acknowledgements)"),
        ("FailedShareAcknowledgementRequests", m.share_ack_failed,
         "Requests carrying acknowledgements that failed (any acknowledgement error)"),
    ):
        out.family(f"kafka_server_brokertopicmetrics_{kafka_name.lower()}_total", "counter",
                   f"{what} (kafka.server:type=BrokerTopicMetrics,name={kafka_name}PerSec).", [((), value)])

    # ---- kafka.server:type=authorizer-metrics (KIP-767); zeros while no authorizer is configured
    for name, value, what in (
            ("authorization_allowed", m.authorization_allowed, "Requests the authorizer allowed "
             "(authorization-allowed-rate-per-minute counts the same events)"),
            ("authorization_denied", m.authorization_denied, "Requests the authorizer denied "
             "(authorization-denied-rate-per-minute counts the same events)"),
            ("authorization_request", m.authorization_allowed + m.authorization_denied,
             "Authorization decisions (authorization-request-rate-per-minute counts the same events)")):
        out.family(f"kafka_server_authorizer_metrics_{name}_total", "counter",
                   f"{what} (kafka.server:type=authorizer-metrics).", [((), value)])
    out.family("kafka_server_authorizer_metrics_acls_total_count", "gauge",
               "ACLs held (kafka.server:type=authorizer-metrics, acls-total-count).",
               [((), len(server.authorizer.index) if server.authorizer is not None else 0)])
    out.family("quafka_authorizer_denial_log_lines_suppressed_total", "counter",
               "Authorization denials not logged because the quafka.authorizer logger was at its cap of "
               "lines a second (a quafka extension).", [((), m.authorizer_log_lines_suppressed)])

    # ---- kafka.server:type=ShareGroupMetrics
    out.family("kafka_server_sharegroupmetrics_recordacknowledgements_total", "counter",
               "Records acknowledged, by type (kafka.server:type=ShareGroupMetrics,"
               "name=RecordAcknowledgementsPerSec,ackType=...).",
               [((("acktype", name),), m.acknowledgements[t]) for t, name in ACK_TYPE_NAMES.items()])
    out.histogram("kafka_server_sharegroupmetrics_partitionloadtimems",
                  "Time to load a share partition's state, in ms "
                  "(kafka.server:type=ShareGroupMetrics,name=PartitionLoadTimeMs).",
                  [((), m.partition_load_time_ms.bounds, m.partition_load_time_ms.counts, m.partition_load_time_ms.sum)])

    dlq = sorted(m.dead_letters.items())
    for index, (kafka_name, what) in enumerate((
        ("DeadLetterQueueRecordCount", "Records written to the group's dead-letter queue"),
        ("DeadLetterQueueTotalProduceRequestsPerSec", "Produce requests (batches) to the group's dead-letter queue"),
        ("DeadLetterQueueFailedProduceRequestsPerSec", "Failed produce requests to the group's dead-letter queue"),
    )):
        short = kafka_name.removesuffix("PerSec").lower()
        out.family(f"kafka_server_sharegroupmetrics_{short}_total", "counter",
                   f"{what} (kafka.server:type=ShareGroupMetrics,name={kafka_name},group=...).",
                   [((("group", group),), counts[index]) for group, counts in dlq])

    # ---- kafka.server:type=SharePartitionMetrics{group,topic,partition}
    manager = server.share_partitions
    contexts = sorted(manager.contexts.values(), key=lambda c: (c.group_id, c.topic.name, c.index))
    per_partition = [(c, (("group", c.group_id), ("topic", c.topic.name), ("partition", c.index))) for c in contexts]
    out.family("kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total", "counter",
               "Records whose acquisition lock timed out (kafka.server:type=SharePartitionMetrics,"
               "name=AcquisitionLockTimeoutPerSec,group=...,topic=...,partition=...).",
               [(labels, c.share_partition.lock_timeout_count) for c, labels in per_partition])
    out.family("kafka_server_sharepartitionmetrics_inflightmessagecount", "gauge",
               "Records in the in-flight window, SPSO to SPEO (kafka.server:type=SharePartitionMetrics,"
               "name=InFlightMessageCount,...).",
               [(labels, c.share_partition.in_flight_count) for c, labels in per_partition])
    out.family("kafka_server_sharepartitionmetrics_inflightbatchcount", "gauge",
               "State batches in the in-flight window (kafka.server:type=SharePartitionMetrics,"
               "name=InFlightBatchCount,...).",
               [(labels, len(c.share_partition.runs)) for c, labels in per_partition])

    # ---- quafka's delivery controls, per share partition (docs/metrics.md "Delivery controls")
    controls = manager.controls
    out.family("quafka_share_partition_waiting_records", "gauge",
               "AVAILABLE records of the window that wait for a due time, by reason: backoff "
               "(quafka.share.redelivery.backoff.*) or delivery_time (quafka.deliver.* headers).",
               [(labels + (("reason", reason),), c.share_partition.runs.waiting_counts[index])
                for c, labels in per_partition for index, reason in ((1, "backoff"), (2, "delivery_time"))])
    out.family("quafka_share_partition_blocked_records", "gauge",
               "AVAILABLE records waiting behind an earlier record of their key (quafka.share.key.ordering).",
               [(labels, c.share_partition.runs.blocked_count) for c, labels in per_partition])
    failed_blocks = {c.key: c.share_partition.policy.on_failure != "continue" for c, _ in per_partition}
    out.family("quafka_share_partition_blocked_keys", "gauge",
               "Keys with a record waiting behind another of the key, or behind the key's failure.",
               [(labels, c.share_partition.keys.blocked_keys(failed_blocks[c.key])) for c, labels in per_partition])
    out.family("quafka_share_partition_failed_keys", "gauge",
               "Keys parked or dead-lettering after a failure (quafka.share.key.ordering.on.failure), until released.",
               [(labels, len(c.share_partition.keys.failed)) for c, labels in per_partition])
    out.family("quafka_share_partition_failed_keys_over_cap_total", "counter",
               "Key failures not parked because the share partition already holds the most failed keys (10,000).",
               [(labels, c.share_partition.failed_keys_over_cap) for c, labels in per_partition])
    out.family("quafka_share_partition_window_stalls_total", "counter",
               "Fetches that found the in-flight window full and nothing in it deliverable while records waited.",
               [(labels, controls.window_stalls.get(c.key, 0)) for c, labels in per_partition])
    out.family("quafka_share_partition_delivery_headers_refused_total", "counter",
               "quafka.deliver.* headers ignored (not a non-negative decimal number) or capped at "
               "quafka.share.delivery.delay.max.ms.",
               [(labels + (("outcome", outcome),), controls.header_outcomes.get(c.key, (0, 0))[index])
                for c, labels in per_partition for index, outcome in ((0, "ignored"), (1, "capped"))])
    actions = ("release", "archive", "release-key")
    out.family("quafka_share_partition_force_actions_total", "counter",
               "Force actions applied by operators (QuafkaAlterInFlight), by action.",
               [(labels + (("action", a),), controls.force_actions.get(c.key, {}).get(a, (0, 0))[0])
                for c, labels in per_partition for a in actions])
    out.family("quafka_share_partition_forced_records_total", "counter",
               "Records moved by force actions, by action.",
               [(labels + (("action", a),), controls.force_actions.get(c.key, {}).get(a, (0, 0))[1])
                for c, labels in per_partition for a in actions])

    # ---- kafka.server:type=ShareSessionCache
    sessions = server.share_sessions
    out.family("kafka_server_sharesessioncache_sharesessionscount", "gauge",
               "Open share sessions (kafka.server:type=ShareSessionCache,name=ShareSessionsCount).",
               [((), len(sessions))])
    out.family("kafka_server_sharesessioncache_sharepartitionscount", "gauge",
               "Partitions in all open share sessions (kafka.server:type=ShareSessionCache,"
               "name=SharePartitionsCount).", [((), sessions.partition_count())])
    out.family("kafka_server_sharesessioncache_sharesessionevictions_total", "counter",
               "Share sessions removed because their connection closed (kafka.server:type=ShareSessionCache,"
               "name=ShareSessionEvictionsPerSec).", [((), sessions.evictions)])
    out.family("quafka_share_fetch_unsent_records_returned_total", "counter",
               "Records a completed ShareFetch acquired but never sent because its connection dropped first: "
               "made available again with their delivery count from before (a quafka extension).",
               [((), server.metrics.share_fetch_unsent_returned)])

    # ---- kafka.server:type=DelayedOperationPurgatory,delayedOperation=ShareFetch
    parked = manager.purgatory.operation_count()
    out.family("kafka_server_delayedoperationpurgatory_numdelayedoperations", "gauge",
               "ShareFetch requests parked waiting for records (kafka.server:type=DelayedOperationPurgatory,"
               "name=NumDelayedOperations,delayedOperation=ShareFetch).",
               [((("delayedoperation", "ShareFetch"),), parked)])

    # ---- kafka.server:type=group-coordinator-metrics
    by_state = dict.fromkeys(GROUP_STATES, 0)
    groups = server.share_groups.list_groups() if server.share_groups is not None else []
    for _group_id, state in groups:
        by_state[state] = by_state.get(state, 0) + 1
    consumer_groups = server.consumer_groups.list_groups() if server.consumer_groups is not None else []
    classic_groups = [(g.group_id, g.state) for g in server.classic_groups.list_groups()] \
        if server.classic_groups is not None else []
    simple_groups = server.consumer_offsets.simple_group_ids() if server.consumer_offsets is not None else []
    classic_groups += [(g, "Empty") for g in simple_groups]  # Kafka holds them as Empty classic groups
    out.family("kafka_server_group_coordinator_metrics_group_count", "gauge",
               "Groups by protocol (kafka.server:type=group-coordinator-metrics,protocol=..., group-count).",
               [((("protocol", "classic"),), len(classic_groups)), ((("protocol", "consumer"),), len(consumer_groups)),
                ((("protocol", "share"),), len(groups))])
    consumer_by_state = dict.fromkeys(CONSUMER_GROUP_STATES, 0)
    for _group_id, state in consumer_groups:
        consumer_by_state[state] = consumer_by_state.get(state, 0) + 1
    out.family("kafka_server_group_coordinator_metrics_consumer_group_count", "gauge",
               "Consumer groups (KIP-848) by state (kafka.server:type=group-coordinator-metrics,state=..., "
               "consumer-group-count).", [((("state", s),), n) for s, n in consumer_by_state.items()])
    classic_by_state = dict.fromkeys(CLASSIC_GROUP_STATES, 0)
    for _group_id, state in classic_groups:
        classic_by_state[state] = classic_by_state.get(state, 0) + 1
    out.family("kafka_coordinator_group_groupmetadatamanager_numgroups", "gauge",
               "Classic groups (kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups).",
               [((), len(classic_groups))])
    for state, n in classic_by_state.items():
        out.family(f"kafka_coordinator_group_groupmetadatamanager_numgroups{state.lower()}", "gauge",
                   f"Classic groups in state {state} (kafka.coordinator.group:type=GroupMetadataManager,"
                   f"name=NumGroups{state}).", [((), n)])
    num_offsets = sum(len(server.consumer_offsets.offsets.committed(g))
                      for g in server.consumer_offsets.offsets.group_ids()) if server.consumer_offsets else 0
    out.family("kafka_coordinator_group_groupmetadatamanager_numoffsets", "gauge",
               "Committed offsets held (kafka.coordinator.group:type=GroupMetadataManager,name=NumOffsets).",
               [((), num_offsets)])
    for name, value, what in (
            ("offset_commit", m.offset_commits, "committed offsets (offset-commit-count)"),
            ("offset_expiration", m.offset_expirations, "expired offsets (offset-expiration-count)"),
            ("offset_deletion", m.offset_deletions, "offsets deleted by OffsetDelete (offset-deletion-count)"),
            ("group_completed_rebalance",
             server.classic_groups.coordinator.completed_rebalances if server.classic_groups else 0,
             "classic group rebalances completed (group-completed-rebalance-count)"),
            ("consumer_group_rebalance",
             server.consumer_groups.coordinator.rebalances if server.consumer_groups else 0,
             "consumer group (KIP-848) rebalances: new target assignments (consumer-group-rebalance-count)")):
        out.family(f"kafka_server_group_coordinator_metrics_{name}_total", "counter",
                   f"The total number of {what}; kafka.server:type=group-coordinator-metrics.", [((), value)])
    out.family("kafka_server_group_coordinator_metrics_share_group_count", "gauge",
               "Share groups by state (kafka.server:type=group-coordinator-metrics,state=..., share-group-count).",
               [((("state", s),), n) for s, n in by_state.items()])

    # ---- kafka.server:type=share-coordinator-metrics
    share_coordinator = server.share_coordinator
    loads = m.share_state_partition_load_ms
    out.family("kafka_server_share_coordinator_metrics_partition_load_time_max", "gauge",
               "Longest replay of one __share_group_state partition at start-up, in ms "
               "(share-coordinator-metrics, partition-load-time-max).", [((), max(loads) if loads else 0.0)])
    out.family("kafka_server_share_coordinator_metrics_partition_load_time_avg", "gauge",
               "Mean replay time of a __share_group_state partition at start-up, in ms "
               "(share-coordinator-metrics, partition-load-time-avg).",
               [((), sum(loads) / len(loads) if loads else 0.0)])
    out.family("kafka_server_share_coordinator_metrics_write_total", "counter",
               "Share-state writes (initialize, write, delete) made durable "
               "(share-coordinator-metrics, write-total).", [((), m.share_state_writes)])
    hist = m.share_state_write_time_ms
    out.family("kafka_server_share_coordinator_metrics_write_latency_avg", "gauge",
               "Mean time of a share-state write round (append, and fsync when flush is on), in ms "
               "(share-coordinator-metrics, write-latency-avg).",
               [((), hist.sum / hist.count if hist.count else 0.0)])
    out.family("kafka_server_share_coordinator_metrics_write_latency_max", "gauge",
               "Longest share-state write round, in ms (share-coordinator-metrics, write-latency-max).",
               [((), hist.max)])
    num = share_coordinator.num_partitions if share_coordinator is not None else 0
    loaded = share_coordinator is not None and share_coordinator.loaded
    out.family("kafka_server_share_coordinator_metrics_num_partitions", "gauge",
               "__share_group_state partitions by state (share-coordinator-metrics, num-partitions).",
               [((("state", "loading"),), 0 if loaded else num), ((("state", "active"),), num if loaded else 0),
                ((("state", "failed"),), 0)])

    # ---- storage
    flusher = server.flusher
    out.family("kafka_log_logmanager_offlinelogdirectorycount", "gauge",
               "Log directories offline after a storage failure (kafka.log:type=LogManager,"
               "name=OfflineLogDirectoryCount).", [((), 0 if server.failed_log_dir is None else 1)])
    out.histogram("kafka_log_logflushstats_logflushrateandtimems",
                  "Log flushes (fsyncs) and their time in ms (kafka.log:type=LogFlushStats,"
                  "name=LogFlushRateAndTimeMs).",
                  [((), flusher.flush_time_ms.bounds, flusher.flush_time_ms.counts, flusher.flush_time_ms.sum)])

    # ---- quafka only
    out.family("quafka_log_flush_failures_total", "counter",
               "Log flushes (fsyncs) that failed; each takes the log directory offline.",
               [((), flusher.flush_failures)])
    out.family("quafka_log_dir_failures_total", "counter",
               "Storage failures that took the log directory offline (any call: write, read, fsync, open).",
               [((), m.log_dir_failures)])
    disk = server.disk_space  # the free-space watermark: one series per log directory (none in memory)
    per_dir = [(("log_dir", disk.path),)] if disk.path is not None else []
    watermark = disk.watermark
    out.family("quafka_log_dir_free_bytes", "gauge",
               "Free space of the log directory's file system at the last check (every second and after "
               "deletions), in bytes.", [(labels, max(watermark.free_bytes, 0)) for labels in per_dir])
    out.family("quafka_log_dir_min_free_bytes", "gauge",
               "The free-space watermark in force: the larger of quafka.log.dir.min.free.bytes and "
               "quafka.log.dir.min.free.percent of the file system, in bytes (0: off).",
               [(labels, watermark.threshold) for labels in per_dir])
    out.family("quafka_log_dir_below_min_free", "gauge",
               "1 while the log directory is below its free-space watermark and produces to user topics are "
               "refused (KAFKA_STORAGE_ERROR); fetches, share groups and internal topics go on.",
               [(labels, 1 if watermark.below else 0) for labels in per_dir])
    out.family("quafka_log_dir_produce_refusals_total", "counter",
               "Partition produces refused because the log directory was below its free-space watermark.",
               [(labels, disk.refusals) for labels in per_dir])
    out.family("quafka_tls_handshakes_total", "counter",
               "TLS handshakes completed on SSL and SASL_SSL listeners.",
               [((("listener", name),), n) for name, n in sorted(m.tls_handshakes.items())])
    out.family("quafka_tls_handshake_failures_total", "counter",
               "TLS handshakes that failed (each logged at INFO with the peer): untrusted_certificate, "
               "expired_certificate, no_client_certificate, timeout, connection_closed, or OpenSSL's reason.",
               [((("listener", name), ("reason", reason)), n)
                for (name, reason), n in sorted(m.tls_handshake_failures.items())])
    _render_log_cleaner(out, getattr(server, "log_cleaner", None))
    out.family("quafka_flush_scheduler_errors_total", "counter",
               "Errors of the periodic flush scheduler other than storage failures (logged; it goes on).",
               [((), m.flush_loop_errors)])
    out.family("kafka_server_socket_server_metrics_authentication_total", "counter",
               "SASL authentications by listener and outcome (successful-authentication, failed-authentication, "
               "successful-reauthentication, failed-reauthentication, expired-connections-killed).",
               [((("listener", listener), ("outcome", outcome)), count)
                for (listener, outcome), count in sorted(m.sasl.items())])
    out.family("quafka_share_partitions", "gauge",
               "Share partitions (group x topic partition) held in memory by this broker.", [((), len(contexts))])
    out.histogram("quafka_share_coordinator_write_time_ms",
                  "Share-state write rounds (one append of every queued write, and its fsync when flush is on), "
                  "in ms.", [((), hist.bounds, hist.counts, hist.sum)])
    out.family("quafka_share_coordinator_load_time_ms", "gauge",
               "Time to replay __share_group_state at start-up, in ms.",
               [((), share_coordinator.load_time_ms if share_coordinator is not None else 0.0)])
    _render_quotas(out, server)
    return out.text()


def _render_log_cleaner(out: TextWriter, cleaner: Any) -> None:
    """kafka.log:type=LogCleaner / LogCleanerManager, as counters of the one cleaner thread."""
    rounds = cleaner.rounds if cleaner is not None else 0
    out.family("kafka_log_logcleaner_rounds_total", "counter", "Log cleaning rounds completed (one log each).",
               [((), rounds)])
    out.family("kafka_log_logcleaner_bytes_read_total", "counter", "Bytes the log cleaner copied from segments.",
               [((), cleaner.bytes_read if cleaner is not None else 0)])
    out.family("kafka_log_logcleaner_bytes_written_total", "counter", "Bytes the log cleaner wrote to cleaned segments.",
               [((), cleaner.bytes_written if cleaner is not None else 0)])
    out.family("kafka_log_logcleaner_max_clean_time_ms", "gauge", "Duration of the last cleaning round, in ms.",
               [((), cleaner.last_round_ms if cleaner is not None else 0.0)])
    out.family("kafka_log_logcleanermanager_uncleanable_partitions_count", "gauge",
               "Partitions the cleaner gave up on until restart (a batch that does not decode; logged).",
               [((), len(cleaner.uncleanable) if cleaner is not None else 0)])
    out.family("quafka_log_cleaner_errors_total", "counter", "Log cleaning rounds that failed (logged).",
               [((), cleaner.errors if cleaner is not None else 0)])


def _render_quotas(out: TextWriter, server: Any) -> None:
    """Client-quota throttles per (quota type, user, client id) and connection-limit refusals
    (server/quotas.py, server/connection_limits.py)."""
    quotas = getattr(server, "quotas", None)
    throttles = sorted(quotas.throttles.items()) if quotas is not None else []
    out.family("quafka_client_quota_throttles_total", "counter",
               "Responses throttled by a client quota, by quota type (producer_byte_rate, consumer_byte_rate, "
               "request_percentage, controller_mutation_rate), user and client id.",
               [((("quota", k), ("user", u), ("client_id", c)), n[0]) for (k, u, c), n in throttles])
    out.family("quafka_client_quota_throttle_time_ms_total", "counter",
               "Total throttle time given to clients, in ms (Kafka: the throttle-time sensor of each "
               "kafka.server:type=Produce|Fetch|Request|ControllerMutation,user=,client-id= bean).",
               [((("quota", k), ("user", u), ("client_id", c)), n[1]) for (k, u, c), n in throttles])
    limits = getattr(server, "connection_limits", None)
    out.family("quafka_connections_refused_total", "counter",
               "Connections closed on accept by a connection limit, by the limit (max.connections, listener "
               "max.connections, max.connections.per.ip).",
               [((("reason", r),), n) for r, n in sorted(limits.refused.items())] if limits is not None else [])
    out.family("quafka_connections_idle_closed_total", "counter",
               "Connections closed after connections.max.idle.ms without a request.",
               [((), limits.idle_closed if limits is not None else 0)])
    out.family("quafka_connections_open", "gauge", "Client connections open.",
               [((), limits.total if limits is not None else 0)])


# --------------------------------------------------------------------------- HTTP


MAX_REQUEST_HEAD_BYTES = 8192
READ_TIMEOUT_S = 10.0


class MetricsServer:
    """GET /metrics over HTTP/1.x, one response per connection. Anything else gets 400, 404 or 405;
    a connection that sends garbage or stalls is closed; nothing it does affects the broker."""

    def __init__(self, broker: "MetricsSource") -> None:
        self.broker = broker
        self._server: asyncio.base_events.Server | None = None
        self._clients: set[asyncio.Task] = set()
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._on_client, host, port, reuse_address=True,
                                                  limit=MAX_REQUEST_HEAD_BYTES)
        sock = self._server.sockets[0].getsockname()
        self.host, self.port = sock[0], sock[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._clients):
            task.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
        await self._server.wait_closed()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            await asyncio.wait_for(self._serve(reader, writer), READ_TIMEOUT_S)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - a bad scrape never reaches the broker
            log.debug("metrics connection closed: %r", exc)
        finally:
            self._clients.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await self._respond(writer, 431, "Request Header Fields Too Large", "request head too large\n")
            return
        except asyncio.IncompleteReadError as exc:
            head = exc.partial
            if b"\n\n" not in head.replace(b"\r\n", b"\n"):
                if head.strip():
                    await self._respond(writer, 400, "Bad Request", "malformed HTTP request\n")
                return
        request_line = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            await self._respond(writer, 400, "Bad Request", "malformed HTTP request\n")
            return
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target not in (b"/metrics", b"/"):
            await self._respond(writer, 404, "Not Found", "try /metrics\n")
            return
        if method not in (b"GET", b"HEAD"):
            await self._respond(writer, 405, "Method Not Allowed", "GET only\n", extra="Allow: GET, HEAD\r\n")
            return
        body = render(self.broker)
        await self._respond(writer, 200, "OK", body, content_type=CONTENT_TYPE, head_only=method == b"HEAD")

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, reason: str, body: str, *,
                       content_type: str = "text/plain; charset=utf-8", extra: str = "",
                       head_only: bool = False) -> None:
        data = body.encode()
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\n{extra}\r\n".encode() + (b"" if head_only else data))
        await writer.drain()
