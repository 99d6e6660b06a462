"""One seeded simulation: the real BrokerServer on simulated storage, driven by simulated clients
through its request handlers, with faults, crashes and restarts, checked after every step.

    result = Simulation(seed=7, steps=500).run()

Everything random comes from `random.Random(seed)` (the broker's uuid4 calls too); time is the
virtual loop's. A run is: set up (topics, group configs; no faults), `steps` steps (a client acts,
or the broker crashes or restarts; then virtual time advances by a random amount; then answers are
handed to the clients and the invariants checked; after a restart, and every `CHECK_EVERY` steps,
full checks through Metadata, Fetch, DescribeShareGroupOffsets and DescribeConfigs), then a drain
(no faults: consumers accept everything until every acknowledged record was delivered to every
group subscribed to it) and a final check.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import traceback
import uuid
from dataclasses import dataclass, field

from quafka.broker import config as cfg
from quafka.broker.server.server import BrokerServer

from . import plants
from .actors import Admin, Consumer, Producer, decode_records, ms, req
from .dead_letters import DeadLetterQueues
from .disk import SimCrash, SimLogStore, SimMetadataStore
from .members import GroupLedger, Member
from .members import GroupModel as GroupModelCG
from .oracle import Oracle, Violation
from .transactions import TxnLedger
from .vloop import WALL_EPOCH_NS, VirtualLoop, install_clock, uninstall_clock
from .world import FaultProfile, Incarnation, SimConnection, World

CHECK_EVERY = 50
ANSWER_WITHIN_MS = 60_000  # longest wait a client asks for is 500 ms
DRAIN_ROUNDS = 600
MAX_START_ATTEMPTS = 8
REPLAY = "PYTHONHASHSEED=0 .venv/bin/python -m tests.sim"
# What a seed's world may hold beyond share groups (issue 28): consumer groups (members.py), share
# groups' dead-letter queues (dead_letters.py), and consumers that drop their connection while a
# ShareFetch is parked. `areas=()` gives the world of the seeds found before them (KNOWN_BUGS):
# the same random draws, so those seeds replay as they did.
# "transactions" (issue 31, transactions.py): transactional producers in about half the seeds.
AREAS = ("consumer-groups", "dlq", "parked-drops", "transactions")
AREAS_BEFORE_TXN = ("consumer-groups", "dlq", "parked-drops")  # the world of KNOWN_BUGS_ALL_AREAS
AREA_SALT = 0xA2EA5


@dataclass
class Result:
    seed: int
    steps: int = 0
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    violation: Violation | None = None
    error: str | None = None  # the simulator itself failed
    report: str = ""
    anomalies: list[str] = field(default_factory=list)
    digest: int = 0
    deliveries: int = 0
    acked_records: int = 0
    profile: str = ""
    pending: dict[str, str] = field(default_factory=dict)  # PENDING invariant -> first violation seen
    commits_acked: int = 0
    dead_letters: int = 0
    txns: dict[str, int] = field(default_factory=dict)  # EndTxn outcomes the clients saw

    @property
    def ok(self) -> bool:
        return self.violation is None and self.error is None


class _LogCapture(logging.Handler):
    """Broker log records at ERROR with an exception that is not a simulated fault."""

    def __init__(self, world: World) -> None:
        super().__init__(logging.ERROR)
        self.world = world

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.world.note_exception(record.exc_info[1], f"logged by {record.name}: {record.getMessage()}")


class Simulation:
    def __init__(self, seed: int, steps: int = 500, *, plant: str | None = None, hours: float | None = None,
                 trace_len: int = 40, full_trace: bool = False, intensity: float = 1.0,
                 strict_exceptions: bool = True, verbose: bool = False, unsafe_power: bool = False,
                 areas: tuple[str, ...] = AREAS, pending_checks: tuple[str, ...] = ()) -> None:
        self.seed = seed
        self.areas = tuple(areas)
        self.pending_checks = tuple(pending_checks)
        self.steps = steps
        self.intensity = intensity
        self.plant = plant
        self.max_seconds = hours * 3600.0 if hours else None
        self.strict_exceptions = strict_exceptions
        self.verbose = verbose
        self.world = World(seed, trace_len)
        if full_trace:
            self.world.full_trace = []
        self.world.note_exception = self._note_exception  # type: ignore[attr-defined]
        self.world.note_handler_exception = lambda exc: self._note_exception(exc, "raised by a handler")  # type: ignore[attr-defined]
        self.world.wall_ms = lambda: WALL_EPOCH_NS // 1_000_000 + self.world.now_ms()  # type: ignore[attr-defined]
        rng = self.world.rng
        self.unsafe_power = unsafe_power
        self.world.profile = FaultProfile.random(rng, intensity, unsafe_power)
        self.world.faults.profile = self.world.profile
        self.oracle = Oracle(self.world)
        self.oracle.pending_checks = frozenset(pending_checks)
        self.groups_ledger = GroupLedger(self)
        self.paused_groups: dict[str, int] = {}
        self.deliveries = 0
        self.tearing_down = False
        self.log_ends: dict = {}
        self.pending_violation: Violation | None = None
        self._choose_setup(rng)

    # ------------------------------------------------------------------ the seed's world
    def _choose_setup(self, rng: random.Random) -> None:
        profile = self.world.profile
        self.lock_choices = (1000, 2000, 5000, 15000)
        self.props = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": "/nonexistent/quafka-sim",
            "auto.create.topics.enable": "false",
            "log.retention.ms": "-1",
            "offsets.topic.num.partitions": str(rng.choice((1, 2, 3))),
            "share.coordinator.state.topic.num.partitions": str(rng.choice((1, 2, 3))),
            "share.coordinator.snapshot.update.records.per.snapshot": str(rng.choice((1, 3, 10, 500))),
            "share.coordinator.state.topic.prune.interval.ms": str(rng.choice((2000, 30000, 300000))),
            "share.coordinator.cold.partition.snapshot.interval.ms": str(rng.choice((5000, 60000, 300000))),
            "share.coordinator.state.topic.segment.bytes": str(rng.choice((1048576, 104857600))),
            "group.share.min.record.lock.duration.ms": "1000",
            "group.share.record.lock.duration.ms": str(rng.choice(self.lock_choices)),
            "group.share.delivery.count.limit": str(rng.choice((2, 3, 5))),
        }
        if profile.flush_on:
            self.props["log.flush.interval.messages"] = "1"
        if rng.random() < 0.3:
            self.props["log.roll.ms"] = str(rng.choice((5000, 60000)))
        # transactions draw from their own random source too (transactions.TXN_SALT)
        self.txns = TxnLedger(self, "transactions" in self.areas)
        if self.txns.producers:
            self.props["transaction.state.log.num.partitions"] = str(self.txns.state_partitions)
        self.config = cfg.BrokerConfig.from_props(self.props)
        n_topics = rng.randint(1, 3)
        self.topic_partitions = {f"t{i}": rng.randint(1, 3) for i in range(n_topics)}
        names = sorted(self.topic_partitions)
        self.producers = [Producer(self, f"P{i}") for i in range(rng.randint(1, 3))]
        self.consumers: list[Consumer] = []
        self.group_setup: dict[str, tuple[list[str], int, int]] = {}
        for g in range(rng.randint(1, 2)):
            group = f"g{g}"
            topics = sorted(rng.sample(names, rng.randint(1, len(names))))
            lock_ms = rng.choice(self.lock_choices)
            limit = rng.choice((2, 3, 5))
            self.group_setup[group] = (topics, lock_ms, limit)
            for c in range(rng.randint(1, 3)):
                consumer = Consumer(self, f"C{g}.{c}", group, topics, rng.choice((1, 2)))
                self.consumers.append(consumer)
                self.world.consumers_by_name[consumer.name] = consumer
        self.admin = Admin(self)
        # the new areas draw from their own random source, so that without them a seed is as before
        area_rng = random.Random(self.seed ^ AREA_SALT)
        self.members: list[Member] = []
        if "consumer-groups" in self.areas and area_rng.random() < 0.75:
            for g in range(area_rng.randint(1, 2)):
                group = f"cg{g}"
                topics = sorted(area_rng.sample(names, area_rng.randint(1, len(names))))
                self.groups_ledger.groups[group] = GroupModelCG(group, topics)
                for m in range(area_rng.randint(1, 3)):
                    self.members.append(Member(self, f"M{g}.{m}", group, topics))
        self.groups_ledger.members = self.members
        self.dlqs = DeadLetterQueues(self, area_rng, sorted(self.group_setup) if "dlq" in self.areas else [])
        self.parked_drop_p = 0.02 if "parked-drops" in self.areas else 0.0
        self.actors = [*self.producers, *self.consumers, self.admin, *self.members, *self.txns.producers]

    def describe(self) -> str:
        groups = "; ".join(f"{g}: {t} lock {lock} limit {lim} x{sum(1 for c in self.consumers if c.group == g)}"
                           for g, (t, lock, lim) in self.group_setup.items())
        cgroups = "; ".join(f"{g}: {m.topics} x{sum(1 for x in self.members if x.group == g)}"
                            for g, m in sorted(self.groups_ledger.groups.items()))
        return (f"topics {self.topic_partitions}; groups {groups}; producers {len(self.producers)}; "
                f"flush {'on' if self.world.profile.flush_on else 'off'}"
                + (f"; consumer groups {cgroups}" if cgroups else "")
                + (f"; DLQs {self.dlqs.describe()}" if self.dlqs.topic_of else "")
                + (f"; transactions {self.txns.describe()}" if self.txns.producers else ""))

    def group_empty(self, group: str) -> bool:
        return all(not c.joined and not c.busy for c in self.consumers if c.group == group)

    # ------------------------------------------------------------------ running
    def run(self) -> Result:
        result = Result(self.seed, profile=self.world.profile.describe())
        loop = VirtualLoop()
        self.world.loop = loop
        loop.set_exception_handler(self._loop_exception)
        asyncio.set_event_loop(loop)
        install_clock(loop)
        id_rng = random.Random(self.seed ^ 0x5EED)
        real_uuid4 = uuid.uuid4
        uuid.uuid4 = lambda: uuid.UUID(int=id_rng.getrandbits(128), version=4)  # type: ignore[assignment]
        quafka_log = logging.getLogger("quafka")
        capture = _LogCapture(self.world)
        saved = (quafka_log.level, quafka_log.propagate)
        quafka_log.addHandler(capture)
        if not self.verbose:
            quafka_log.propagate = False
        asyncio_log = logging.getLogger("asyncio")
        asyncio_saved = asyncio_log.level
        asyncio_log.setLevel(logging.CRITICAL)
        undo_plant = plants.install(self.plant, self.world) if self.plant else None
        started = time.perf_counter()
        try:
            loop.run_until_complete(self._main(result))
        except Violation as v:
            self._record_violation(result, v)
        except BaseException as exc:  # noqa: BLE001 - the simulator's own failure, reported with its seed
            result.error = f"{type(exc).__name__}: {exc}"
            result.report = self._report("simulator-error", result.error + "\n" + traceback.format_exc())
        finally:
            if undo_plant is not None:
                undo_plant()
            uuid.uuid4 = real_uuid4  # type: ignore[assignment]
            quafka_log.removeHandler(capture)
            quafka_log.setLevel(saved[0])
            quafka_log.propagate = saved[1]
            asyncio_log.setLevel(asyncio_saved)
            self._close_loop(loop)
            uninstall_clock()
            asyncio.set_event_loop(None)
        result.wall_seconds = time.perf_counter() - started
        result.sim_seconds = loop.time()
        result.faults = dict(self.world.faults.counts) | dict(self.world.stats)
        result.anomalies = list(self.world.anomalies)
        result.digest = self.world.trace_digest
        result.deliveries = self.deliveries
        result.acked_records = self.oracle.acked_records
        result.pending = dict(self.oracle.pending_seen)
        result.commits_acked = self.groups_ledger.commits_acked
        result.dead_letters = self.dlqs.seen
        for txn in self.txns.txns:
            result.txns[txn.outcome or "open"] = result.txns.get(txn.outcome or "open", 0) + 1
        return result

    def _close_loop(self, loop: VirtualLoop) -> None:
        try:
            inc = self.world.inc
            if inc is not None and inc.server is not None:
                for s in getattr(inc.server, "_servers", []):
                    s.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            for handle in list(loop._scheduled):  # noqa: SLF001
                handle.cancel()
        finally:
            loop.close()

    def _record_violation(self, result: Result, v: Violation) -> None:
        result.violation = v
        result.report = self._report(v.invariant, v.message)

    def _report(self, invariant: str, message: str) -> str:
        w = self.world
        lines = [
            f"SIMULATION VIOLATION  seed={self.seed}  step={w.step}  t={w.now_ms() / 1000.0:.3f}s  "
            f"invariant={invariant}" + (f"  plant={self.plant}" if self.plant else ""),
            f"  {message}",
            f"  world: {self.describe()}",
            f"  faults: {w.profile.describe()}",
            f"  last {len(w.trace)} events:",
            *(f"    {line}" for line in w.trace),
            f"  replay: {self.replay_command()} --trace 200",
        ]
        return "\n".join(lines)

    def replay_command(self) -> str:
        cmd = f"{REPLAY} --seed {self.seed} --steps {self.steps}"
        if self.intensity != 1.0:
            cmd += f" --intensity {self.intensity:g}"
        if self.unsafe_power:
            cmd += " --unsafe-power"
        if self.plant:
            cmd += f" --plant {self.plant}"
        if self.areas != AREAS:
            cmd += f" --areas {','.join(self.areas) or 'none'}"
        for name in self.pending_checks:
            cmd += f" --check {name}"
        return cmd

    # ------------------------------------------------------------------ exceptions seen inside the broker
    def _note_exception(self, exc: BaseException, where: str) -> None:
        if self.tearing_down or isinstance(exc, (SimCrash, OSError, asyncio.CancelledError)):
            return
        if self.world.inc is None or not self.world.inc.alive:
            return
        text = f"step {self.world.step}: {where}: {type(exc).__name__}: {exc}"
        self.world.anomalies.append(text + "\n" + "".join(traceback.format_exception(exc))[-3000:])
        self.world.event(f"UNEXPECTED EXCEPTION {where}: {type(exc).__name__}: {exc}")
        if self.strict_exceptions and self.pending_violation is None:
            self.pending_violation = Violation("unexpected-exception", text)

    def _loop_exception(self, loop, context: dict) -> None:
        exc = context.get("exception")
        if exc is not None:
            self._note_exception(exc, f"asyncio: {context.get('message', '')}")

    # ------------------------------------------------------------------ the broker
    async def start_broker(self) -> None:
        world = self.world
        for attempt in range(MAX_START_ATTEMPTS):
            faults_on = world.faults.enabled
            if attempt >= 3:
                world.faults.enabled = False
            world.incarnations += 1
            inc = Incarnation(world, world.incarnations)
            world.inc = inc
            inc.store = SimLogStore(inc, world.disk, world.wall_ms())
            if inc.store.recovered_cut_bytes:
                world.stats["recovery: torn bytes cut"] += inc.store.recovered_cut_bytes
            metadata = SimMetadataStore(inc, world.disk, self.config.node_id)
            try:
                server = BrokerServer(self.config, memory=True, log_store=inc.store, metadata_store=metadata)
                inc.server = server
                await server.start()
            except (SimCrash, OSError, Exception) as exc:  # noqa: BLE001 - a start that failed: try again
                world.event(f"start of incarnation {inc.number} failed: {type(exc).__name__}: {exc}")
                if inc.alive:  # not a crash: the process exits; the page cache keeps everything
                    world.crash_now(inc, f"failed start ({type(exc).__name__})", power=False)
                await self.teardown(inc)
                if attempt >= 3 and not isinstance(exc, SimCrash):
                    raise Violation("restart-failed", f"the broker cannot start from the stored records with no "
                                                      f"fault injected: {type(exc).__name__}: {exc}") from exc
                continue
            finally:
                world.faults.enabled = faults_on
            world.event(f"broker incarnation {inc.number} started")
            return
        raise Violation("restart-failed", f"the broker did not start in {MAX_START_ATTEMPTS} attempts")

    async def teardown(self, inc: Incarnation) -> None:
        """Kill an incarnation: its tasks, its timers, its listeners; the disk image stays."""
        self.tearing_down = True
        try:
            inc.alive = False
            server = inc.server
            for s in getattr(server, "_servers", []) if server is not None else []:
                s.close()
            loop = self.world.loop
            me = asyncio.current_task()
            for _ in range(200):
                for handle in list(loop._scheduled):  # noqa: SLF001 - the dead broker's timers
                    handle.cancel()
                tasks = [t for t in asyncio.all_tasks(loop) if t is not me and not t.done()]
                if not tasks:
                    break
                for t in tasks:
                    t.cancel()
                await asyncio.sleep(0)
            else:
                self.world.event(f"teardown: {len(tasks)} task(s) of incarnation {inc.number} ignore cancellation")
            await asyncio.sleep(0)
        finally:
            self.tearing_down = False

    async def restart(self, why: str) -> None:
        world = self.world
        old = world.inc
        await self.teardown(old)
        self.process_completions()  # answers of the old incarnation (and lost connections) first
        self.oracle.on_restart()
        await asyncio.sleep(world.rng.uniform(0.05, 2.0))  # the operator (or systemd) restarts it
        self.process_completions()
        await self.start_broker()
        world.stats["restarts"] += 1
        await self.check_all(f"after restart ({why})")

    async def maybe_restart(self) -> None:
        world = self.world
        inc = world.inc
        if not inc.alive:
            await self.restart(f"crash {inc.crash_reason}")
            return
        server = inc.server
        if getattr(server, "halted", False) or server._stopped.is_set():  # noqa: SLF001
            world.event(f"broker halted: {getattr(server, 'failed_log_dir', None) and server.failed_log_dir.where}")
            world.stats["halts"] += 1
            stopped = asyncio.ensure_future(server._stopped.wait())  # noqa: SLF001
            await asyncio.wait((stopped,), timeout=10.0)
            stopped.cancel()
            world.crash_now(inc, "halted (its log directory failed)", power=False)
            await self.restart("halt")

    # ------------------------------------------------------------------ answers
    def check_liveness(self) -> None:
        """Every request is answered (or its connection closed) within its wait plus a minute."""
        now = self.world.now_ms()
        for actor in self.actors:
            conn = actor.conn
            if conn is not None and conn.busy and conn.usable and now - conn.sent_at_ms > ANSWER_WITHIN_MS:
                raise Violation("request-never-answered",
                                f"{actor.name}: {conn.what} sent at t={conn.sent_at_ms / 1000.0:.3f}s is still "
                                f"unanswered at t={now / 1000.0:.3f}s, its connection open and the broker up")

    def process_completions(self, before: int | None = None) -> None:
        """Hand the answers that arrived to their clients, in arrival order (`before`: only those
        that arrived before the answer with that number)."""
        completions = self.world.completions
        while completions and (before is None or completions[0][0] < before):
            _seq, on_done, response, failure, now_ms = completions.popleft()
            if on_done is not None:
                on_done(response, failure, now_ms)
        if self.pending_violation is not None:
            v, self.pending_violation = self.pending_violation, None
            raise v

    # ------------------------------------------------------------------ checks
    async def check_all(self, why: str, final: bool = False) -> None:
        """Metadata, every partition's log, every group's start offsets and configs, as answered."""
        world = self.world
        faults_on = world.faults.enabled
        world.faults.enabled = False
        conn = SimConnection(world, "checker")

        async def call(entity):
            response = await conn.call(entity)
            self.process_completions(before=conn.answer_seq)  # what the clients heard first comes first
            return response

        try:
            self.process_completions()
            world.event(f"CHECK {why}")
            response = await call(req(3, 12, topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
            if response is None:
                return
            self.admin.on_metadata(response, check=True)
            self.log_ends: dict[tuple[uuid.UUID, int], int] = {}
            for topic in sorted(self.oracle.topics.values(), key=lambda t: t.name):
                for p in range(topic.partitions):
                    records = await self.fetch_all(call, topic.topic_id, p)
                    if records is None:
                        return
                    self.oracle.check_log(topic.topic_id, p, records)
            for group in sorted(self.oracle.groups):
                topics = self.admin._group_topics(group)  # noqa: SLF001
                if topics:
                    response = await call(req(90, 1, groups=[{"group_id": group, "topics": [
                        {"topic_name": name, "partitions": tuple(range(n))} for name, _tid, n in topics]}]))
                    if response is None:
                        return
                    self.admin.on_describe_offsets(response, group, world.now_ms(), log_ends=self.log_ends)
                response = await call(req(32, 4, resources=[{"resource_type": 32, "resource_name": group,
                                                                  "configuration_keys": None}],
                                               include_synonyms=False, include_documentation=False))
                if response is None:
                    return
                r = response.results[0]
                if int(r.error_code) == 0:
                    self.oracle.check_group_configs(group, {c.name: c.value for c in r.configs})
            for group in sorted(self.groups_ledger.groups):
                sent_seq = self.groups_ledger.next_seq()
                response = await call(req(9, 8, groups=[{"group_id": group, "topics": None}], require_stable=False))
                if response is None:
                    return
                g = response.groups[0]
                if int(g.error_code) == 0:
                    for t in g.topics:
                        for p in t.partitions:
                            if int(p.error_code) == 0:
                                self.groups_ledger.check_fetched(group, t.name, p.partition_index, p.committed_offset,
                                                                 sent_seq, "the checker")
            if self.dlqs.topic_ids:
                if not await self.dlqs.check(lambda tid, p, decode: self.fetch_all(call, tid, p, decode), final):
                    return
            if self.txns.topic_ids:
                if not await self.txns.check(call, final):
                    return
            self.world.stats["checks"] += 1
        finally:
            conn.drop()
            world.faults.enabled = faults_on
        self.process_completions()

    async def fetch_all(self, call, topic_id: uuid.UUID, partition: int, decode=None):
        """Every record of the partition: offset -> (value, producer id, sequence), or what `decode`
        gives: offset -> the rest of each (offset, ...) tuple it returns."""
        records: dict = {}
        offset = 0
        for _ in range(10000):
            entity = req(1, 13, cluster_id=None, replica_id=-1, max_wait=ms(0), min_bytes=0, max_bytes=64 << 20,
                         isolation_level=0, session_id=0, session_epoch=-1, topics=[{"topic_id": topic_id, "partitions": [
                             {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                              "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 32 << 20}]}],
                         forgotten_topics_data=(), rack_id="")
            response = await call(entity)
            if response is None:
                return None
            part = response.responses[0].partitions[0]
            if int(part.error_code) != 0 and (getattr(self.world.inc.server, "halted", False)
                                              or not self.world.inc.alive):
                return None  # the broker is going down (a fault before the check): checked after its restart
            if int(part.error_code) != 0:
                raise Violation("acked-record-lost", f"a full Fetch of {self.oracle.topic_name(topic_id)}-{partition} "
                                                     f"failed with error {int(part.error_code)}")
            got = (decode or decode_records)(part.records)
            for o, *rest in got:
                if o >= offset:
                    records[o] = tuple(rest)
            if decode is None:
                self.log_ends[(topic_id, partition)] = part.high_watermark
            if not got or max(o for o, *_ in got) + 1 >= part.high_watermark:
                return records
            offset = max(o for o, *_ in got) + 1
        return records

    # ------------------------------------------------------------------ the run
    async def _main(self, result: Result) -> None:
        world = self.world
        await self.start_broker()
        await self._setup()
        world.faults.enabled = True
        rng = world.rng
        for step in range(self.steps):
            world.step = step
            result.steps = step + 1
            if self.max_seconds is not None and world.loop.time() >= self.max_seconds:
                break
            for g, until in list(self.paused_groups.items()):
                if step >= until:
                    del self.paused_groups[g]
                    world.event(f"group {g} resumes")
            x = rng.random()
            profile = world.profile
            if x < profile.crash_between_steps:
                world.crash_now(world.inc, "between steps")
            elif x < profile.crash_between_steps + profile.clean_restart:
                await self._clean_restart()
            else:
                self._act(rng)
            await asyncio.sleep(self._delta(rng))
            self.process_completions()
            await self.maybe_restart()
            self.check_liveness()
            if step % CHECK_EVERY == CHECK_EVERY - 1:
                await self.check_all("periodic")
        await self._drain()

    async def _clean_restart(self) -> None:
        world = self.world
        inc = world.inc
        world.event("clean restart: stop")
        faults_on = world.faults.enabled
        world.faults.enabled = False
        try:
            await inc.server.stop()
        except BaseException as exc:  # noqa: BLE001
            world.event(f"stop raised {type(exc).__name__}: {exc}")
        finally:
            world.faults.enabled = faults_on
        if inc.alive:
            world.crash_now(inc, "clean stop", power=False)
        world.stats["clean restarts"] += 1
        await self.restart("clean stop")

    def _act(self, rng: random.Random) -> None:
        if self.parked_drop_p and rng.random() < self.parked_drop_p:
            parked = [c for c in self.consumers if c.busy and c.conn.what.startswith("ShareFetch")]
            if parked:
                rng.choice(parked).drop_while_fetching()
                return
        candidates = []
        weights = []
        for actor in self.actors:
            if actor.busy:
                continue
            candidates.append(actor)
            weights.append(3 if actor.kind in ("producer", "member", "txn") else 4 if actor.kind == "consumer" else 1)
        if not candidates:
            return
        actor = rng.choices(candidates, weights)[0]
        actor.act()

    @staticmethod
    def _delta(rng: random.Random) -> float:
        x = rng.random()
        if x < 0.55:
            return 0.0
        if x < 0.8:
            return rng.uniform(0.001, 0.1)
        if x < 0.96:
            return rng.uniform(0.1, 3.0)
        if x < 0.995:
            return rng.uniform(3.0, 20.0)
        return rng.uniform(20.0, 70.0)

    async def _setup(self) -> None:
        """Topics and group configs, with no faults: answered before any client starts."""
        world = self.world
        conn = SimConnection(world, "setup")
        for name, partitions in sorted(self.topic_partitions.items()):
            response = await conn.call(req(19, 7, topics=[{"name": name, "num_partitions": partitions,
                                                           "replication_factor": -1, "assignments": (), "configs": ()}],
                                           timeout=ms(30000), validate_only=False))
            t = response.topics[0]
            assert int(t.error_code) == 0, t
            self.oracle.on_topic_created(name, t.topic_id, partitions)
        for group, name in sorted(self.dlqs.topic_of.items()):
            response = await conn.call(req(19, 7, topics=[{"name": name, "num_partitions": self.dlqs.partitions[name],
                                                           "replication_factor": -1, "assignments": (), "configs": [
                                                               {"name": "errors.deadletterqueue.group.enable",
                                                                "value": "true"}]}],
                                           timeout=ms(30000), validate_only=False))
            t = response.topics[0]
            assert int(t.error_code) == 0, t
            self.dlqs.topic_ids[name] = t.topic_id
        for name, partitions in sorted(self.txns.topics.items()):
            response = await conn.call(req(19, 7, topics=[{"name": name, "num_partitions": partitions,
                                                           "replication_factor": -1, "assignments": (), "configs": ()}],
                                           timeout=ms(30000), validate_only=False))
            t = response.topics[0]
            assert int(t.error_code) == 0, t
            self.txns.topic_ids[name] = t.topic_id
        for group, (topics, lock_ms, limit) in sorted(self.group_setup.items()):
            self.oracle.add_group(group, topics, lock_ms, limit)
            entity, configs = self.admin.group_config_entity(group, lock_ms, limit, self.dlqs.group_configs(group))
            response = await conn.call(entity)
            assert self.admin.on_group_config(response, group, lock_ms, limit, configs), response
        conn.drop()
        world.event(f"setup: {self.describe()}")

    async def _drain(self) -> None:
        """No more faults: consumers accept everything until every acknowledged record reached every
        group subscribed to it (locks of abandoned records expire meanwhile), then the final check."""
        world = self.world
        world.step = self.steps
        world.faults.enabled = False
        self.paused_groups.clear()
        for c in [*self.consumers, *self.members, *self.txns.producers]:
            c.draining = True
            c.rejoin_at_step = 0
        await self.maybe_restart()
        for round_ in range(DRAIN_ROUNDS):
            world.step = self.steps + round_
            for actor in self.actors:
                if actor.busy:
                    continue
                if actor.kind in ("consumer", "member"):
                    actor.act()
                elif actor.kind == "producer" and actor.pending is not None:
                    actor.act()
                elif actor.kind == "admin":
                    actor.settle()
                elif actor.kind == "txn" and not actor.settled:
                    actor.act()
            lock = max((g.lock_ms for g in self.oracle.groups.values()), default=1000)
            await asyncio.sleep(lock / 1000.0 if round_ % 10 == 9 else 0.05)
            self.process_completions()
            await self.maybe_restart()
            self.check_liveness()
            if round_ > 10 and all(self.oracle.undelivered(g) == 0 for g in self.oracle.groups) \
                    and not any(p.pending for p in self.producers) and not self.oracle.uncertain_topics \
                    and not self.admin.to_create \
                    and all(self.groups_ledger.converged(g) for g in self.groups_ledger.groups) \
                    and not self.dlqs.writes_pending() and self.txns.settled():
                break
        await asyncio.sleep(0.1)
        self.process_completions()
        await self.check_all("final", final=True)
        for group in sorted(self.oracle.groups):
            self.oracle.check_drained(group)
        for group in sorted(self.groups_ledger.groups):
            self.groups_ledger.check_drained(group)
