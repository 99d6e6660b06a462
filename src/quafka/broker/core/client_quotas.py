"""Client quotas as Kafka keeps them: quota entities, the precedence that picks one for a request,
a sampled rate, and the throttle time that brings a client back within its quota.

Pure: every call takes its inputs and `now_ms`; nothing here reads a clock or does I/O. The shell
(`broker/server/quotas.py`) records values after serving a request and mutes the connection for the
throttle time these functions return.

**Entities.** A quota entity is a user, a client id, or a user and a client id, each part either a
name or the default (Kafka's `<default>`; on the wire an entity name of null). An entity is a tuple
of `(entity_type, name_or_None)` pairs sorted by type, None standing for the default:
`(("client-id", "app"),)`, `(("user", None),)`, `(("client-id", None), ("user", "alice"))`.

**Precedence.** For a request of user U with client id C, the first entity that has a value for the
quota type wins (Kafka's `ClientQuotaManager.DefaultQuotaCallback.quotaLimit`; the order is the
docs' "Quotas" section):

    1. user U, client-id C           5. user <default>, client-id <default>
    2. user U, client-id <default>   6. user <default>
    3. user U                        7. client-id C
    4. user <default>, client-id C   8. client-id <default>

The usage a quota is measured against is shared by everyone that the matched entity names
(`quotaMetricTags`): a quota on user U counts all of U's client ids together; a `<default>` part
counts each user (or client id) separately.

**Rates.** `SampledRate` is Kafka's `Rate` over a `SampledStat` (a `WindowedSum`): `samples`
windows of `window_ms` (quota.window.num 11, quota.window.size.seconds 1). Its measure divides the
retained sum by the elapsed time since the oldest sample, taken as at least `samples - 1` whole
windows in Kafka (`Rate.windowSize`), so one request at the start is not measured over a few
milliseconds. Deviation: quafka takes at least `burst_windows` windows (quafka.quota.burst.windows,
off by default: Kafka's arithmetic; 1 measures a new client over one window), see
DEFAULT_BURST_WINDOWS for why.

**Throttle.** A value is recorded first; when the rate is then above the quota bound the throttle
time is `(rate - bound) / bound * window_size_ms` (`QuotaUtils.throttleTime`): the delay that
brings the rate back to the bound if nothing else is recorded. `request_percentage` caps it at one
window (`ClientRequestQuotaManager.throttleTime`). `controller_mutation_rate` is a token bucket
(`TokenBucket`, burst `samples * window * rate`), strict: a mutation is refused while the bucket
is below zero (`StrictControllerMutationQuota`), and the throttle time is the time to refill to
zero (`ControllerMutationQuotaManager.throttleTimeMs`).
"""

from __future__ import annotations

from dataclasses import dataclass

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID)  # quafka has no IP connection-rate quotas (`ip` entities are refused)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
# Kafka's QuotaConfig: the byte rates are longs, the others doubles; all must be positive.
INTEGER_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})

DEFAULT_WINDOW_NUM = 11  # quota.window.num
DEFAULT_WINDOW_MS = 1000  # quota.window.size.seconds
# quafka.quota.burst.windows: the least elapsed time a rate is measured over, in windows. Kafka's
# `Rate.windowSize` uses quota.window.num - 1 (10): a client starting from nothing may send ten
# seconds of its quota at once, and that burst then comes back every time its sample expires from
# the window (every ~11 s), so a greedy producer at 1 MB/s measures 0.6-1.4 MB/s over 20-second
# windows; with 1 it measures 0.95-1.05 MB/s (docs/security.md, "Quotas and connection limits").
DEFAULT_BURST_WINDOWS = 0  # off: Kafka's window_num - 1
INACTIVE_SENSOR_EXPIRY_MS = 3_600_000  # ClientQuotaManager.InactiveSensorExpirationTimeSeconds

Entity = tuple[tuple[str, "str | None"], ...]


def make_entity(user: str | None | type = ..., client_id: str | None | type = ...) -> Entity:
    """An entity from its parts: a name, None for the default, or leave a part out."""
    parts = []
    if client_id is not ...:
        parts.append((CLIENT_ID, client_id))
    if user is not ...:
        parts.append((USER, user))
    return tuple(parts)


def normalize_entity(parts) -> Entity:
    """An entity from (type, name) pairs in any order; raises ValueError for an unknown type, a
    type given twice or no parts (Kafka: InvalidRequestException)."""
    items = sorted(((str(t), n) for t, n in parts), key=lambda item: item[0])  # names may be None (default)
    if not items:
        raise ValueError("Invalid empty client quota entity")
    types = [t for t, _ in items]
    if len(set(types)) != len(types):
        raise ValueError(f"Duplicate {types[0]} entity type in the client quota entity")
    for t, _ in items:
        if t == IP:
            raise ValueError("quafka does not support ip quota entities (connection creation rate quotas)")
        if t not in ENTITY_TYPES:
            raise ValueError(f"Unknown client quota entity type {t!r}")
    return tuple(items)


def validate_quota_value(key: str, value: float) -> str | None:
    """None when `value` may be set for `key`, else why not (Kafka's ClientQuotaControlManager
    .validateQuotaKeyValue: an unknown key, a non-positive value, a fraction for a long key)."""
    if key not in QUOTA_KEYS:
        return f"Invalid configuration key {key}"
    if not value > 0 or value != value or value in (float("inf"), float("-inf")):
        return f"Quota {key} must be greater than 0"
    if key in INTEGER_KEYS and value != int(value):
        return f"Configuration {key} must be a Long value"
    return None


def precedence(user: str, client_id: str) -> tuple[Entity, Entity, Entity, Entity, Entity, Entity, Entity, Entity]:
    """The eight entities a request of (user, client_id) may match, highest precedence first."""
    return (
        ((CLIENT_ID, client_id), (USER, user)),
        ((CLIENT_ID, None), (USER, user)),
        ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)),
        ((CLIENT_ID, None), (USER, None)),
        ((USER, None),),
        ((CLIENT_ID, client_id),),
        ((CLIENT_ID, None),),
    )


def usage_key(entity: Entity, user: str, client_id: str) -> tuple[str, str]:
    """The (user, client id) the matched entity's usage is counted under: a part the entity names
    (default or not) takes the request's value, a part it leaves out is "" (Kafka's metric tags)."""
    types = {t for t, _ in entity}
    return (user if USER in types else "", client_id if CLIENT_ID in types else "")


class _Sample:
    __slots__ = ("value", "start_ms", "last_ms")

    def __init__(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = now_ms
        self.last_ms = now_ms

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = now_ms
        self.last_ms = now_ms


class SampledRate:
    """A rate per second over `samples` windows of `window_ms` (see the module docstring)."""

    __slots__ = ("samples", "window_ms", "burst_windows", "_ring", "_current", "last_record_ms")

    def __init__(self, samples: int = DEFAULT_WINDOW_NUM, window_ms: int = DEFAULT_WINDOW_MS,
                 burst_windows: int | None = None) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.burst_windows = samples - 1 if burst_windows is None else burst_windows  # None: Kafka's
        self._ring: list[_Sample] = []  # samples + 1 slots: one may overlap the start of the window
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._ring):
                sample = _Sample(now_ms)
                self._ring.append(sample)
            else:
                sample = self._ring[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_ms = now_ms
        self.last_record_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        return self._ring[self._current]

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._ring:
            if now_ms - sample.last_ms >= expire_ms:
                sample.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """Elapsed time since the oldest retained sample, at least `burst_windows` windows (Kafka:
        `samples - 1`)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._ring), default=now_ms)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.burst_windows:
            elapsed += (self.burst_windows - full) * self.window_ms
        return max(elapsed, 1)

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(s.value for s in self._ring)

    def measure(self, now_ms: int) -> float:
        """The rate per second."""
        total = self.total(now_ms)
        return total / (self.window_size_ms(now_ms) / 1000.0)


class TokenBucket:
    """Kafka's `TokenBucket` for controller mutations: refills at `rate` per second up to a burst
    of `samples * window * rate`; starts full."""

    __slots__ = ("tokens", "last_ms", "started", "last_record_ms")

    def __init__(self) -> None:
        self.tokens = 0.0
        self.last_ms = 0
        self.started = False
        self.last_record_ms = 0

    def measure(self, rate: float, burst: float, now_ms: int) -> float:
        if not self.started:
            self.tokens, self.started = burst, True
        else:
            self.tokens = min(burst, self.tokens + rate * (now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms
        return self.tokens

    def record(self, permits: float, rate: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.measure(rate, burst, now_ms) - permits)
        self.last_record_ms = now_ms


@dataclass(frozen=True, slots=True)
class QuotaMatch:
    """The quota that applies to a request: the bound, the entity it came from, and the
    (user, client id) its usage is counted under."""

    bound: float
    entity: Entity
    usage: tuple[str, str]


class ClientQuotas:
    """Every configured quota and the usage measured against them (one per quota type and usage
    key). `configured` is False while no quota of any type exists: the shell's one cheap check."""

    def __init__(self, window_num: int = DEFAULT_WINDOW_NUM, window_ms: int = DEFAULT_WINDOW_MS,
                 burst_windows: int = DEFAULT_BURST_WINDOWS) -> None:
        self.window_num = window_num
        self.window_ms = window_ms
        self.burst_windows = window_num - 1 if burst_windows <= 0 else min(burst_windows, window_num - 1)
        self.entities: dict[Entity, dict[str, float]] = {}
        self._by_key: dict[str, dict[Entity, float]] = {k: {} for k in QUOTA_KEYS}
        self._rates: dict[tuple[str, str, str], SampledRate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._last_expiry_ms = 0

    # ------------------------------------------------------------------ configuration
    @property
    def configured(self) -> bool:
        return bool(self.entities)

    def enabled(self, key: str) -> bool:
        return bool(self._by_key[key])

    def set_quotas(self, entity: Entity, quotas: dict[str, float]) -> None:
        """Replace the quotas of an entity (empty: it has none). Usage measured so far is kept."""
        old = self.entities.pop(entity, {})
        for key in old:
            self._by_key[key].pop(entity, None)
        if quotas:
            self.entities[entity] = dict(quotas)
            for key, value in quotas.items():
                self._by_key[key][entity] = float(value)

    def quotas_of(self, entity: Entity) -> dict[str, float]:
        return dict(self.entities.get(entity, {}))

    def lookup(self, key: str, user: str, client_id: str) -> QuotaMatch | None:
        """The quota of type `key` for a request of (user, client_id), by precedence; None when no
        entity has one. `user` is the principal's name ("" when there is none)."""
        table = self._by_key[key]
        if not table:
            return None
        for entity in precedence(user, client_id):
            bound = table.get(entity)
            if bound is not None:
                return QuotaMatch(bound, entity, usage_key(entity, user, client_id))
        return None

    # ------------------------------------------------------------------ rates
    def _rate(self, key: str, usage: tuple[str, str]) -> SampledRate:
        rate = self._rates.get((key, *usage))
        if rate is None:
            rate = self._rates[(key, *usage)] = SampledRate(self.window_num, self.window_ms, self.burst_windows)
        return rate

    def record_and_get_throttle_time_ms(self, key: str, user: str, client_id: str, value: float,
                                        now_ms: int) -> int:
        """Record `value` against the (user, client_id)'s quota of type `key`; the throttle time
        (0 when within quota or when no quota applies). Kafka's
        `ClientQuotaManager.recordAndGetThrottleTimeMs`."""
        match = self.lookup(key, user, client_id)
        if match is None:
            return 0
        self._maybe_expire(now_ms)
        rate = self._rate(key, match.usage)
        rate.record(value, now_ms)
        return throttle_time_ms(rate, match.bound, now_ms,
                                self.window_ms if key == REQUEST_PERCENTAGE else None)

    def unrecord(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (Kafka's `unrecordQuotaSensor`, for a response not sent)."""
        match = self.lookup(key, user, client_id)
        if match is not None:
            self._rate(key, match.usage).record(-value, now_ms)

    def max_value_in_quota_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most that can be recorded at once without a certain throttle (Kafka's
        `getMaxValueInQuotaWindow`: bound * (samples - 1) * window; quafka: bound * burst_windows *
        window); None when no quota applies."""
        match = self.lookup(key, user, client_id)
        if match is None:
            return None
        return match.bound * max(self.burst_windows, 1) * self.window_ms / 1000.0

    def measured_rate(self, key: str, user: str, client_id: str, now_ms: int) -> float | None:
        match = self.lookup(key, user, client_id)
        if match is None:
            return None
        rate = self._rates.get((key, *match.usage))
        return 0.0 if rate is None else rate.measure(now_ms)

    # ------------------------------------------------------------------ controller mutations
    def try_record_mutation(self, user: str, client_id: str, permits: float, now_ms: int, *,
                            strict: bool = True) -> int:
        """Record `permits` partition mutations. Strict (Kafka's `StrictControllerMutationQuota`):
        refused while the bucket is below zero, returning the throttle time (> 0: the caller
        answers THROTTLING_QUOTA_EXCEEDED and records nothing); else recorded, returning 0.
        Permissive (older request versions): always recorded, returning the throttle time once
        the bucket went below zero."""
        match = self.lookup(CONTROLLER_MUTATION_RATE, user, client_id)
        if match is None:
            return 0
        bucket = self._buckets.get(match.usage)
        if bucket is None:
            bucket = self._buckets[match.usage] = TokenBucket()
        burst = self.window_num * self.window_ms / 1000.0 * match.bound
        if strict:
            tokens = bucket.measure(match.bound, burst, now_ms)
            if tokens < 0:
                return _refill_ms(tokens, match.bound)
            bucket.record(permits, match.bound, burst, now_ms)
            return 0
        bucket.record(permits, match.bound, burst, now_ms)
        return _refill_ms(bucket.tokens, match.bound) if bucket.tokens < 0 else 0

    # ------------------------------------------------------------------ expiry
    def _maybe_expire(self, now_ms: int) -> None:
        """Drop the usage of clients idle for an hour (Kafka expires their sensors), at most once a
        minute, so the number of client ids seen cannot grow the broker's memory without bound."""
        if now_ms - self._last_expiry_ms < 60_000:
            return
        self._last_expiry_ms = now_ms
        cutoff = now_ms - INACTIVE_SENSOR_EXPIRY_MS
        for k in [k for k, r in self._rates.items() if r.last_record_ms < cutoff]:
            del self._rates[k]
        for k in [k for k, b in self._buckets.items() if b.last_record_ms < cutoff]:
            del self._buckets[k]

    @property
    def tracked_count(self) -> int:
        return len(self._rates) + len(self._buckets)


def throttle_time_ms(rate: SampledRate, bound: float, now_ms: int, cap_ms: int | None = None) -> int:
    """`(measured - bound) / bound * window_size_ms`, rounded, when the rate is above the bound
    (Kafka's `QuotaUtils.throttleTime`; `boundedThrottleTime` with a cap)."""
    measured = rate.measure(now_ms)
    if measured <= bound:
        return 0
    throttle = round((measured - bound) / bound * rate.window_size_ms(now_ms))
    if cap_ms is not None:
        throttle = min(throttle, cap_ms)
    return int(throttle)


def _refill_ms(tokens: float, rate: float) -> int:
    return int(round(-tokens / rate * 1000.0))


def describe_entity(entity: Entity) -> str:
    """`user 'alice', client-id <default>`: how logs and errors name an entity."""
    return ", ".join(f"{t} {'<default>' if n is None else repr(n)}" for t, n in sorted(entity, key=_display_order))


def _display_order(part: tuple[str, str | None]) -> int:
    return 0 if part[0] == USER else 1
