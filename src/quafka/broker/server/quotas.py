"""The client-quota shell: keeps `core.client_quotas.ClientQuotas` in step with the quotas in the
metadata journal, records what each request costs, and says how long to throttle it.

Kafka's throttle (`KafkaApis` with `ClientQuotaManager.throttle`): the response carries
`throttle_time_ms`, and the broker mutes the channel (reads nothing more from that connection) for
that long after sending it; clients (KIP-219) also hold back their next request. Who a request
belongs to is the session's principal name (`User:<name>` without the type; `ANONYMOUS` before or
without authentication, as Kafka's quota user) and the header's client id.

What is recorded (each as Kafka's KafkaApis records it):

- `producer_byte_rate`: the Produce request's size (`handleProduceRequest`: request.sizeInBytes).
- `consumer_byte_rate`: the Fetch and ShareFetch response's record bytes (`handleFetchRequest`,
  `handleShareFetchRequest`: the response size before it is sent), with MaxBytes first capped to
  what one quota window allows (`getMaxValueInQuotaWindow`). A throttled Fetch is answered empty
  with the throttle time and its bytes taken back (`unrecordQuotaSensor`; the consumer fetches the
  same offsets again). Deviation for ShareFetch: Kafka answers a throttled ShareFetch empty too,
  but its records were already acquired, so they stay locked until the acquisition lock expires
  and come back with a delivery attempt spent; quafka sends the records it acquired and throttles
  the connection afterwards.
- `request_percentage`: the time the broker spent serving the request (from reading it to
  handing its response to the socket, less the time it waited parked, which no thread spends), as
  a percentage of one thread per second (`ClientRequestQuotaManager`: requestThreadTimeNanos). Its
  throttle is capped at one window. It is recorded in connection.py for every request; responses
  encoded through kio carry it in their throttle time, the hand-encoded hot ones (Produce, Fetch,
  ShareFetch, ShareAcknowledge) carry only their bandwidth throttle, and the connection is muted
  for the larger of the two.
- `controller_mutation_rate`: partitions created or deleted by CreateTopics (v6+), CreatePartitions
  (v3+) and DeleteTopics (v5+), strictly (`ControllerMutationQuotaManager.newQuotaFor`): a topic
  asked for while the quota is exhausted gets THROTTLING_QUOTA_EXCEEDED; older versions are
  permissive (accepted, the response throttled).

When no quota is configured at all, `active` is False and the request path checks only that.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta
from time import perf_counter
from typing import Any

from quafka.broker.core.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
    describe_entity,
)

log = logging.getLogger("quafka.quotas")

# Not counted against request_percentage (Kafka's exempt requests: the client must be able to
# negotiate versions and authenticate whatever its quota).
REQUEST_QUOTA_EXEMPT_KEYS = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate

QUOTA_TYPE_NAMES = {PRODUCER_BYTE_RATE: "Produce", CONSUMER_BYTE_RATE: "Fetch", REQUEST_PERCENTAGE: "Request",
                    CONTROLLER_MUTATION_RATE: "ControllerMutation"}


class QuotaService:
    """The broker's client quotas (one per broker; `BrokerServer.quotas`)."""

    def __init__(self, state: Any, clock_ms) -> None:
        self._state = state
        self._clock_ms = clock_ms
        config = state.config
        self.quotas = ClientQuotas(int(config.get("quota.window.num")),
                                   int(config.get("quota.window.size.seconds")) * 1000,
                                   int(config.get("quafka.quota.burst.windows")))
        self.active = False
        # throttles per (quota type, user, client id): [count, total ms] (server/metrics.py)
        self.throttles: dict[tuple[str, str, str], list[int]] = {}
        self.mutations_refused = 0

    def load(self) -> None:
        """Take the quotas replayed from the journal, and follow later changes."""
        self.on_quotas_changed()
        self._state.client_quota_listeners.append(self.on_quotas_changed)

    def on_quotas_changed(self) -> None:
        configured = self._state.client_quotas
        for entity in list(self.quotas.entities):
            if entity not in configured:
                self.quotas.set_quotas(entity, {})
        for entity, values in configured.items():
            if self.quotas.quotas_of(entity) != values:
                log.info("client quotas of %s are now %s", describe_entity(entity), values)
                self.quotas.set_quotas(entity, values)
        self.active = self.quotas.configured

    # ------------------------------------------------------------------ recording
    @staticmethod
    def _who(ctx) -> tuple[str, str]:
        return ctx.session.principal_name, ctx.client_id or ""

    def _throttled(self, key: str, user: str, client_id: str, throttle_ms: int) -> None:
        counts = self.throttles.get((key, user, client_id))
        if counts is None:
            if len(self.throttles) >= 10_000:  # bounded: the oldest entries go first
                self.throttles.pop(next(iter(self.throttles)))
            counts = self.throttles[(key, user, client_id)] = [0, 0]
        counts[0] += 1
        counts[1] += throttle_ms
        log.debug("throttling %s for %d ms (user %r, client id %r)", QUOTA_TYPE_NAMES[key], throttle_ms, user,
                  client_id)

    def record(self, ctx, key: str, value: float) -> int:
        """Record `value` for the request's (user, client id); its throttle time (0: none)."""
        user, client_id = self._who(ctx)
        throttle = self.quotas.record_and_get_throttle_time_ms(key, user, client_id, value, self._clock_ms())
        if throttle > 0:
            self._throttled(key, user, client_id, throttle)
        return throttle

    def unrecord(self, ctx, key: str, value: float) -> None:
        user, client_id = self._who(ctx)
        self.quotas.unrecord(key, user, client_id, value, self._clock_ms())

    def fetch_max_bytes(self, ctx, max_bytes: int) -> int:
        """MaxBytes capped to what one quota window allows (Kafka's getMaxValueInQuotaWindow)."""
        user, client_id = self._who(ctx)
        cap = self.quotas.max_value_in_quota_window(CONSUMER_BYTE_RATE, user, client_id)
        return max_bytes if cap is None else min(max_bytes, max(int(cap), 1))

    def record_request_time(self, ctx, elapsed_ms: float) -> int:
        """`request_percentage`: the serving time as a percentage of one thread for a second."""
        if not self.quotas.enabled(REQUEST_PERCENTAGE):
            return 0
        return self.record(ctx, REQUEST_PERCENTAGE, elapsed_ms / 10.0)  # ms / 1000 ms * 100 %

    def on_response(self, ctx, response: Any, started: float) -> tuple[Any, int]:
        """Called by the connection for every response while a quota is active: records the
        request time (request_percentage), and returns the response — a kio one with the throttle
        time set — and the time to mute the connection (the larger of the bandwidth throttle a
        handler set and the request-time one)."""
        throttle = ctx.throttle_ms
        if ctx.api_key not in REQUEST_QUOTA_EXEMPT_KEYS and self.quotas.enabled(REQUEST_PERCENTAGE):
            busy_ms = ctx.busy_ms if ctx.busy_ms >= 0 else (perf_counter() - started) * 1000.0
            throttle = max(throttle, self.record_request_time(ctx, busy_ms))
        if throttle > 0 and response is not None and not isinstance(response, (bytes, bytearray)):
            current = getattr(response, "throttle_time", None)
            if isinstance(current, timedelta) and current < timedelta(milliseconds=throttle):
                response = dataclasses.replace(response, throttle_time=timedelta(milliseconds=throttle))
        return response, throttle

    def try_mutation(self, ctx, partitions: int, *, strict: bool) -> int:
        """Record `partitions` controller mutations; a throttle time > 0 from a strict quota means
        refused (THROTTLING_QUOTA_EXCEEDED, nothing recorded)."""
        if not self.quotas.enabled(CONTROLLER_MUTATION_RATE):
            return 0
        user, client_id = self._who(ctx)
        throttle = self.quotas.try_record_mutation(user, client_id, partitions, self._clock_ms(), strict=strict)
        if throttle > 0:
            self._throttled(CONTROLLER_MUTATION_RATE, user, client_id, throttle)
            if strict:
                self.mutations_refused += 1
        return throttle


class MutationQuota:
    """One request's controller-mutation quota (Kafka's Strict/PermissiveControllerMutationQuota):
    `allows(partitions)` records and says whether a topic may go ahead; `throttle_ms` is what the
    response carries. A no-op when no quota is active."""

    __slots__ = ("_service", "_ctx", "_strict", "throttle_ms")

    def __init__(self, ctx, strict_since_version: int) -> None:
        service = getattr(ctx.server, "quotas", None)
        self._service = service if service is not None and service.active else None
        self._ctx = ctx
        self._strict = ctx.api_version >= strict_since_version
        self.throttle_ms = 0

    def allows(self, partitions: int) -> bool:
        if self._service is None:
            return True
        throttle = self._service.try_mutation(self._ctx, max(partitions, 0), strict=self._strict)
        self.throttle_ms = max(self.throttle_ms, throttle)
        self._ctx.throttle_ms = max(self._ctx.throttle_ms, throttle)  # the connection is muted for it
        return not (self._strict and throttle > 0)
