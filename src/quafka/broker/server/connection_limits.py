"""Connection limits: how many connections the broker, a listener and one IP address may hold
open, and the idle-connection sweep (Kafka's `SocketServer.ConnectionQuotas` and the Selector's
idle expiry).

- Connections are counted when accepted, before a TLS handshake (Kafka's Acceptor counts before the
  channel's handshake), so clients stuck in handshakes hold their slots.
- `max.connections` (broker-wide) and `listener.name.<listener>.max.connections` (that listener):
  Kafka's acceptor waits for a slot (new connections wait in the TCP backlog); quafka closes the
  new connection at once instead, so a client sees it refused and retries with its reconnect
  backoff, and the broker never stalls its one loop on a full listener.
- `max.connections.per.ip` with `max.connections.per.ip.overrides` ("host:count,..."): a
  connection past its address's limit is closed at once, as Kafka closes it
  (`TooManyConnectionsException`). Host names in the overrides are resolved when the limits are
  read (at start-up and when a dynamic change arrives).
- `connections.max.idle.ms`: a connection that sent nothing for that long, with no request in
  flight and not muted by a quota, is closed. A sweep runs every quarter of the limit and counts
  the sweeps a connection stayed silent through, so a connection is closed between 1 and 1.25
  times the limit after its last bytes (Kafka's Selector checks its LRU on every poll).

Each refusal is counted (`quafka_connections_refused_total{reason}`) and logged, at most once a
second per reason so that a flood cannot flood the log.

The limits are read from the broker's current configuration at every accept (they are dynamic in
Kafka, cluster-wide); the parsed overrides are cached per configuration text.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from typing import Any

from quafka.broker._config_defs import parse_connection_overrides

log = logging.getLogger("quafka.connection")

LOG_INTERVAL_S = 1.0


class ConnectionLimits:
    def __init__(self, state: Any) -> None:
        self._state = state
        self.per_ip: dict[str, int] = {}
        self.per_listener: dict[str, int] = {}
        self.total = 0
        self.refused: dict[str, int] = {"max.connections": 0, "listener max.connections": 0,
                                        "max.connections.per.ip": 0}
        self.idle_closed = 0
        self._overrides_text: str | None = None
        self._overrides: dict[str, int] = {}
        self._last_logged: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    # ------------------------------------------------------------------ accept / close
    def _limit_for_ip(self, host: str) -> int:
        config = self._state.config
        text = str(config.get("max.connections.per.ip.overrides") or "")
        if text != self._overrides_text:
            self._overrides_text = text
            self._overrides = _resolve(parse_connection_overrides(text))
        limit = self._overrides.get(host)
        return int(config.get("max.connections.per.ip")) if limit is None else limit

    def try_open(self, peer: str, host: str, listener: str) -> bool:
        """Count a new connection in, or say no (the caller closes it). Called when the TCP
        connection is accepted — before a TLS handshake, as Kafka's Acceptor counts a connection
        (ConnectionQuotas.inc) before its channel's handshake — so connections stuck in their
        handshakes count against the limits too."""
        config = self._state.config
        reason = None
        if self.total >= int(config.get("max.connections")):
            reason, limit = "max.connections", int(config.get("max.connections"))
        else:
            per_listener = config.listener_prop(listener, "max.connections")
            if per_listener is not None and self.per_listener.get(listener, 0) >= int(per_listener):
                reason, limit = "listener max.connections", int(per_listener)
            else:
                limit = self._limit_for_ip(host)
                if self.per_ip.get(host, 0) >= limit:
                    reason = "max.connections.per.ip"
        if reason is not None:
            self.refused[reason] += 1
            self._log_refusal(reason, f"closing connection from {peer} on listener {listener}: "
                                      f"{reason} limit {limit} reached")
            return False
        self.total += 1
        self.per_listener[listener] = self.per_listener.get(listener, 0) + 1
        self.per_ip[host] = self.per_ip.get(host, 0) + 1
        return True

    def release(self, host: str, listener: str) -> None:
        """A connection counted in by `try_open` closed (or its TLS handshake failed)."""
        self.total -= 1
        _decrement(self.per_listener, listener)
        _decrement(self.per_ip, host)

    def _log_refusal(self, reason: str, message: str) -> None:
        now = time.monotonic()
        if now - self._last_logged.get(reason, float("-inf")) < LOG_INTERVAL_S:
            self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
            return
        self._last_logged[reason] = now
        suppressed = self._suppressed.pop(reason, 0)
        extra = f" ({suppressed} more refused since the last such line)" if suppressed else ""
        log.warning("%s%s", message, extra)

    # ------------------------------------------------------------------ idle connections
    async def run_idle_sweep(self, connections) -> None:
        """Close connections silent for connections.max.idle.ms (-1: never)."""
        while True:
            idle_ms = int(self._state.config.get("connections.max.idle.ms"))
            if idle_ms < 0:
                await asyncio.sleep(60.0)
                continue
            interval_ms = max(idle_ms / 4.0, 10.0)
            await asyncio.sleep(interval_ms / 1000.0)
            # the last bytes came during the first counted sweep's interval: one sweep more than
            # the limit holds guarantees at least idle_ms of silence
            ticks_needed = math.ceil(idle_ms / interval_ms) + 1
            for connection in list(connections):
                if connection.task is not None or connection.muted or connection.closing:
                    connection.idle_ticks = 0
                    continue
                connection.idle_ticks += 1
                if connection.idle_ticks >= ticks_needed:
                    self.idle_closed += 1
                    log.info("closing connection from %s: idle for more than %d ms (connections.max.idle.ms)",
                             connection.peer, idle_ms)
                    connection.close()


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _resolve(overrides: dict[str, int]) -> dict[str, int]:
    """Overrides by address: host names resolved to every address they have."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
            out[host] = count
            continue
        except OSError:
            pass
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %r (%s); its override is not applied",
                        host, exc)
            continue
        for info in infos:
            out[str(info[4][0])] = count
    return out
