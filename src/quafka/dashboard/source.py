"""Source: the one module of the dashboard that talks to the broker (through quafka.client's
AsyncAdmin and AsyncPartitionReader, the calls the CLI makes), so one implementation serves a
quafka broker and Apache Kafka alike.

Every call is guarded: a broker error never becomes a 500. ``ExtensionUnavailable`` (the broker
serves no quafka extension API: Apache Kafka, or quafka with quafka.api.extension.enable=false)
becomes ``Unavailable("needs-quafka", ...)``; an ``*_AUTHORIZATION_FAILED`` answer becomes
``Unavailable("not-authorized", ...)`` naming the resource (the broker checks every call against
the dashboard's login: docs/security.md); anything else is logged with its context and becomes
``Unavailable("error", ...)``. The templates show the reason in place of the panel.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from quafka.client import AsyncAdmin
from quafka.client._admin_in_flight import ExtensionUnavailable
from quafka.client.dead_letters import fetch_source
from quafka.client.errors import KafkaException
from quafka.client.reader import AsyncPartitionReader
from quafka.protocol.errors import ErrorCode

from .settings import DashboardSettings

__all__ = ["ConsumerGroupData", "FailuresData", "OverviewData", "ShareGroupData", "Source", "TopicData",
           "Unavailable", "WorkersData", "is_unavailable"]

log = logging.getLogger("quafka.dashboard")
T = TypeVar("T")

AUTHORIZATION_CODES = frozenset({ErrorCode.cluster_authorization_failed, ErrorCode.group_authorization_failed,
                                 ErrorCode.topic_authorization_failed,
                                 ErrorCode.transactional_id_authorization_failed,
                                 ErrorCode.delegation_token_authorization_failed})
EXTENSION_API_KEY = 32000  # QuafkaDescribeInFlight: advertised in ApiVersions by a quafka broker
RECORD_PARTITIONS = 16  # the topic page reads recent records of at most this many partitions
CALL_TIMEOUT_S = 10.0
OVERVIEW_TOPIC_ROWS = 100  # topics listed on the overview (a filter narrows a broker with more)
SOURCE_READS_PER_SAMPLE = 20  # source records of headers-only dead letters read per failures sample
SOURCE_CACHE_SIZE = 2000  # source records kept (a log record never changes)
# DescribeLogDirs sizes every partition: with 1,000 topics it was a fifth of an overview sample's
# broker CPU (benchmarks/dashboard.py), and disk use moves slowly; live samples ask at most this often
LOG_DIRS_MAX_AGE_MS = 30_000


@dataclass(frozen=True)
class Unavailable:
    """Why a panel has no data: ``kind`` is "needs-quafka", "not-authorized", "not-served" or "error"."""

    kind: str
    reason: str


def is_unavailable(value: Any) -> bool:
    return isinstance(value, Unavailable)


MISSING_CODES = frozenset({ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition})


async def guard(what: str, call: Awaitable[T], missing: Any = Unavailable) -> T | Unavailable | Any:
    """``await call``, or the Unavailable its failure maps to (logged unless it is expected).
    ``missing``: returned instead when the broker answers that the group or topic does not exist
    (by default that is an Unavailable like any other error)."""
    try:
        return await asyncio.wait_for(call, CALL_TIMEOUT_S)
    except ExtensionUnavailable as exc:
        return Unavailable("needs-quafka", f"needs a quafka broker: {exc.message}")
    except KafkaException as exc:
        if missing is not Unavailable and exc.code in MISSING_CODES:
            return missing
        if exc.code in AUTHORIZATION_CODES:
            return Unavailable("not-authorized", f"not authorized: {what} ({exc.message})")
        log.warning("dashboard: %s failed: %s", what, exc)
        return Unavailable("error", f"{what} failed: {exc.message}")
    except (OSError, asyncio.TimeoutError, ValueError) as exc:
        log.warning("dashboard: %s failed: %r", what, exc)
        return Unavailable("error", f"{what} failed: {exc!r}")


@dataclass
class OverviewData:
    sample_ms: int
    quafka: bool | Unavailable
    cluster: Any
    topics: Any  # {name: TopicDescription}
    end_offsets: Any  # {(topic, partition): log end offset}
    groups: Any  # [ListedGroup]
    share: dict[str, Any] = field(default_factory=dict)  # {group: ShareGroupDescription | Unavailable}
    share_offsets: dict[str, Any] = field(default_factory=dict)  # {group: {(t, p): (start, lag)}}
    consumer: dict[str, Any] = field(default_factory=dict)
    consumer_offsets: dict[str, Any] = field(default_factory=dict)  # {group: {(t, p): (offset, meta)}}
    log_dirs: Any = None
    topic_filter: str | None = None  # ?topics=: a part of the names listed
    topics_matching: int = 0  # topics whose name holds the filter
    topics_shown: list[str] = field(default_factory=list)  # the first OVERVIEW_TOPIC_ROWS of them, by name


@dataclass
class TopicData:
    sample_ms: int
    name: str
    description: Any
    earliest: Any
    latest: Any
    configs: Any
    records: dict[int, Any] = field(default_factory=dict)  # {partition: [Record] | Unavailable}


@dataclass
class ShareGroupData:
    sample_ms: int
    group: str
    description: Any
    offsets: Any  # {(t, p): (start, lag)}
    in_flight: Any  # {(t, p): InFlightPartitionView}
    configs: Any
    located: Any = None


@dataclass
class ConsumerGroupData:
    sample_ms: int
    group: str
    description: Any
    committed: Any
    latest: Any


@dataclass
class FailuresData:
    sample_ms: int
    letters: dict[str, Any]  # {group: [DeadLetterRecord] | Unavailable}
    groups: Any = None  # the share groups looked at, or Unavailable
    # headers-only letters (errors.deadletterqueue.copy.record.enable=false): their source records,
    # {(topic, partition, offset): Record | None (no longer in the log)}; absent = not read (yet)
    sources: dict[tuple[str, int, int], Any] = field(default_factory=dict)
    source_problems: dict[str, Any] = field(default_factory=dict)  # {group: Unavailable}: why not read


@dataclass
class WorkersData:
    sample_ms: int
    scrapes: dict[str, Any]  # {url: Prometheus text | Unavailable}


def now_ms() -> int:
    return int(time.time() * 1000)


class Source:
    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self.admin = AsyncAdmin(dict(settings.client_config))
        self._reader: AsyncPartitionReader | None = None
        self._source_cache: OrderedDict[tuple[str, int, int], Any] = OrderedDict()
        self._log_dirs_cache: tuple[int, Any] | None = None  # (sample ms, answer) of the last DescribeLogDirs

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
        await self.admin.close()

    def _reader_client(self) -> AsyncPartitionReader:
        if self._reader is None:
            config = dict(self.settings.client_config)
            config.pop("request.timeout.ms", None)
            self._reader = AsyncPartitionReader(config)
        return self._reader

    async def is_quafka(self) -> bool:
        """Whether the broker serves quafka's extension APIs (advertised in its ApiVersions)."""
        cluster = await self.admin._get_cluster()
        conn = await cluster.any_connection()
        return EXTENSION_API_KEY in conn.api_versions

    # ------------------------------------------------------------------ pages

    async def overview(self, topic_filter: str | None = None, live: bool = False) -> OverviewData:
        """``topic_filter``: the topics panel lists the topics whose name holds it (all when None),
        at most OVERVIEW_TOPIC_ROWS of them in name order: end offsets are asked for those and for
        the partitions consumer groups commit to (their lag), not for every partition of a broker
        with thousands. ``live``: a live sampler's sample, which reuses a disk answer younger than
        LOG_DIRS_MAX_AGE_MS (a page load always asks)."""
        a = self.admin
        quafka = await guard("probing the broker", self.is_quafka())  # first: connects once, then the rest
        cluster, topics, groups = await asyncio.gather(
            guard("DescribeCluster", a.describe_cluster()),
            guard("listing topics", a.list_topics(include_internal=False)), guard("ListGroups", a.list_groups()))
        data = OverviewData(now_ms(), quafka, cluster, topics, Unavailable("error", "no topics"), groups)
        data.topic_filter = topic_filter
        if not is_unavailable(groups):
            share = [g.group_id for g in groups if g.type == "share"]
            consumer = [g.group_id for g in groups if g.type in ("consumer", "classic")]
            await asyncio.gather(self._share_groups(share, data), self._consumer_groups(consumer, data))
        if not is_unavailable(topics):
            matching = sorted(t for t in topics if topic_filter is None or topic_filter in t)
            data.topics_matching = len(matching)
            data.topics_shown = matching[:OVERVIEW_TOPIC_ROWS]
            tps = {(t, p) for t in data.topics_shown for p in topics[t].partitions}
            for offsets in data.consumer_offsets.values():
                if not is_unavailable(offsets):  # (a partition of a deleted topic has no end offset to ask)
                    tps.update(tp for tp in offsets if tp[0] in topics and tp[1] in topics[tp[0]].partitions)
            latest = await guard("ListOffsets", a.list_offsets({tp: "latest" for tp in sorted(tps)})) if tps else {}
            data.end_offsets = latest if is_unavailable(latest) else {tp: o for tp, (o, _) in latest.items()}
        cached = self._log_dirs_cache
        if live and cached is not None and data.sample_ms - cached[0] < LOG_DIRS_MAX_AGE_MS:
            data.log_dirs = cached[1]
        else:
            data.log_dirs = await self._log_dirs()
            self._log_dirs_cache = (data.sample_ms, data.log_dirs)
        return data

    async def _share_groups(self, ids: list[str], data: OverviewData) -> None:
        if not ids:
            return
        described = await guard("ShareGroupDescribe", self.admin.describe_share_groups(ids))
        for gid in ids:
            data.share[gid] = described if is_unavailable(described) else described.get(gid)
        # one DescribeShareGroupOffsets for all the groups (per coordinator), not one per group:
        # with 100 groups that was 200 requests (and a FindCoordinator each) per overview sample
        batched = await guard("DescribeShareGroupOffsets", self.admin.list_share_groups_offsets(ids))
        for gid in ids:
            answer = batched if is_unavailable(batched) else batched[gid]
            if isinstance(answer, KafkaException):
                answer = await guard(f"share group {gid!r} offsets", _raise(answer))
            data.share_offsets[gid] = answer

    async def _consumer_groups(self, ids: list[str], data: OverviewData) -> None:
        if not ids:
            return
        described = await guard("DescribeGroups", self.admin.describe_consumer_groups(ids))
        for gid in ids:
            data.consumer[gid] = described if is_unavailable(described) else described.get(gid)
        offsets = await asyncio.gather(*(guard(f"consumer group {gid!r} offsets",
                                               self.admin.list_consumer_group_offsets(gid)) for gid in ids))
        data.consumer_offsets = dict(zip(ids, offsets))

    async def _log_dirs(self) -> Any:
        return await guard("DescribeLogDirs", self.admin.describe_log_dirs())

    async def topic(self, name: str) -> TopicData:
        a = self.admin
        described = await guard(f"describing topic {name!r}", a.describe_topics([name]), missing={})
        description = described if is_unavailable(described) else described.get(name)
        data = TopicData(now_ms(), name, description, Unavailable("error", "no partitions"),
                         Unavailable("error", "no partitions"), None)
        if description is None or is_unavailable(description):
            return data
        data.configs = await guard(f"configs of topic {name!r}", a.describe_config_entries("topic", name))
        tps = [(name, p) for p in sorted(description.partitions)]
        earliest, latest = await asyncio.gather(guard("ListOffsets earliest", a.list_offsets({tp: "earliest" for tp in tps})),
                                                guard("ListOffsets latest", a.list_offsets({tp: "latest" for tp in tps})))
        data.earliest = earliest if is_unavailable(earliest) else {p: o for (_, p), (o, _) in earliest.items()}
        data.latest = latest if is_unavailable(latest) else {p: o for (_, p), (o, _) in latest.items()}
        if not is_unavailable(data.earliest) and not is_unavailable(data.latest):
            for _, p in tps[:RECORD_PARTITIONS]:
                start = max(data.earliest[p], data.latest[p] - self.settings.recent_records)
                if start < data.latest[p]:
                    data.records[p] = await guard(f"reading {name}-{p}", self._read(name, p, start, data.latest[p]))
                else:
                    data.records[p] = []
        return data

    async def _read(self, topic: str, partition: int, start: int, end: int) -> list:
        limit = self.settings.value_preview_bytes + self.settings.key_preview_bytes
        out = []
        async for record in self._reader_client().read(topic, partition, start, end,
                                                       max_bytes=max(limit * self.settings.recent_records, 65536)):
            out.append(record)
        return out[-self.settings.recent_records:]

    async def share_group(self, group: str, locate: tuple[str, int, int] | None = None) -> ShareGroupData:
        a = self.admin
        described = await guard(f"describing share group {group!r}", a.describe_share_groups([group]), missing={})
        offsets, in_flight, configs = await asyncio.gather(
            guard(f"offsets of share group {group!r}", a.list_share_group_offsets(group), missing={}),
            guard(f"in-flight records of share group {group!r}",
                  a.describe_in_flight(group, max_rows=self.settings.max_rows), missing={}),
            guard(f"configs of group {group!r}", a.describe_configs("group", group)))
        description = described if is_unavailable(described) else described.get(group)
        data = ShareGroupData(now_ms(), group, description, offsets, in_flight, configs)
        if locate is not None:
            data.located = await self.locate(group, *locate)
        return data

    async def locate(self, group: str, topic: str, partition: int, offset: int) -> Any:
        """Where record ``offset`` of topic-partition is for the group (quafka.client.in_flight_locate)."""
        from quafka.client import in_flight_locate

        return await guard(f"locating {topic}-{partition} offset {offset}",
                           in_flight_locate.locate_record(self.admin, group, topic, partition, offset))

    async def consumer_group(self, group: str) -> ConsumerGroupData:
        a = self.admin
        described = await guard(f"describing consumer group {group!r}", a.describe_consumer_groups([group]),
                                missing={})
        committed = await guard(f"offsets of consumer group {group!r}", a.list_consumer_group_offsets(group))
        description = described if is_unavailable(described) else described.get(group)
        latest: Any = {}
        if not is_unavailable(committed) and committed:
            answer = await guard("ListOffsets", a.list_offsets({tp: "latest" for tp in committed}))
            latest = answer if is_unavailable(answer) else {tp: o for tp, (o, _) in answer.items()}
        return ConsumerGroupData(now_ms(), group, description, committed, latest)

    async def failures(self, group: str | None) -> FailuresData:
        groups: Any
        if group is not None:
            groups = [group]
        else:
            listed = await guard("ListGroups", self.admin.list_groups(types=["share"]))
            groups = listed if is_unavailable(listed) else [g.group_id for g in listed]
        data = FailuresData(now_ms(), {}, groups)
        if is_unavailable(groups):
            return data
        # one DescribeConfigs of the DLQ key of every group (was a full DescribeConfigs with synonyms
        # per group: 100 requests per sample with 100 share groups; benchmarks/dashboard.py)
        batched = await guard("DescribeConfigs of the groups", self.admin.describe_configs_of(
            "group", groups, ["errors.deadletterqueue.topic.name"]))
        for gid in groups:
            configs = batched if is_unavailable(batched) else batched[gid]
            if isinstance(configs, KafkaException):
                configs = await guard(f"configs of group {gid!r}", _raise(configs))
            dlq = None if is_unavailable(configs) else (configs.get("errors.deadletterqueue.topic.name") or "").strip()
            if is_unavailable(configs):
                data.letters[gid] = configs
            elif not dlq:
                if group is not None:
                    data.letters[gid] = Unavailable("not-served", f"share group {gid!r} has no dead-letter queue "
                                                                  "(errors.deadletterqueue.topic.name is not set)")
            else:
                data.letters[gid] = await guard(f"dead letters of group {gid!r}", self._letters(gid, dlq))
                if not is_unavailable(data.letters[gid]):
                    read = await guard(f"source records of group {gid!r}'s dead letters",
                                       self._sources(data.letters[gid], data.sources))
                    if is_unavailable(read):
                        data.source_problems[gid] = read
        return data

    async def _sources(self, letters: list, into: dict[tuple[str, int, int], Any]) -> None:
        """The source records of the newest headers-only letters, for their payload preview: at most
        ``SOURCE_READS_PER_SAMPLE`` log reads per sample; a record read once is kept (a log record
        never changes) in a cache of ``SOURCE_CACHE_SIZE``."""
        log_ranges: dict[str, Any] = {}
        reads = 0
        for letter in sorted(letters, key=lambda x: -x.timestamp_ms):
            if letter.has_copy:
                continue
            key = (letter.topic, letter.partition, letter.offset)
            if key not in self._source_cache:
                if reads >= SOURCE_READS_PER_SAMPLE:
                    continue
                reads += 1
                self._source_cache[key] = await fetch_source(self.admin, self._reader_client(), letter, log_ranges)
                while len(self._source_cache) > SOURCE_CACHE_SIZE:
                    self._source_cache.popitem(last=False)
            self._source_cache.move_to_end(key)
            into[key] = self._source_cache[key]

    async def _letters(self, group: str, dlq: str) -> list:
        return await self.admin.list_dead_letters(group, dlq, limit=self.settings.dead_letter_limit)

    async def workers(self) -> WorkersData:
        scrapes = await asyncio.gather(*(guard(f"scraping {url}", asyncio.to_thread(_get, url))
                                         for url in self.settings.worker_metrics_urls))
        return WorkersData(now_ms(), dict(zip(self.settings.worker_metrics_urls, scrapes)))

    # ------------------------------------------------------------------ actions (actions.py)

    async def call(self, what: str, fn: Callable[[AsyncAdmin], Awaitable[T]]) -> T | Unavailable:
        return await guard(what, fn(self.admin))


async def _raise(exc: BaseException) -> Any:
    raise exc


def _get(url: str, timeout_s: float = 3.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - configured URLs
        return response.read(4 << 20).decode("utf-8", errors="replace")


def group_config(configs: Any, name: str) -> str | None:
    return None if is_unavailable(configs) or not isinstance(configs, Mapping) else configs.get(name)
