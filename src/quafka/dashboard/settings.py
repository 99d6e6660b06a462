"""DashboardSettings: everything a dashboard needs to run, validated as a whole before it starts.

The dashboard is a client of the broker (docs/dashboard.md): it logs in with an ordinary client
config (``client_config``: bootstrap.servers plus the security keys of docs/security.md, read from a
properties file as the tools' ``--command-config``) and answers HTTP on ``listen`` ("http://HOST:PORT",
the grammar of the broker's ``metrics.listener``; port 0 picks a free port). Both ways to run it
(in the broker process on ``quafka.dashboard.listener``, or ``quafka dashboard``) build one of these.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DashboardSettings", "SettingsError", "is_loopback", "load_client_config", "parse_listen"]

_LISTEN_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(\[[^\]]*\]|[^:/\[\]]*):([0-9]+)/?$")
# the keys of quafka's AsyncAdmin besides the security ones (client/admin.py ADMIN_CONFIG)
_ADMIN_KEYS = ("bootstrap.servers", "client.id", "request.timeout.ms")


class SettingsError(ValueError):
    """A dashboard setting that cannot work, with what is wrong."""


def parse_listen(value: str) -> tuple[str, int]:
    """"http://HOST:PORT" -> (host, port); IPv6 hosts in brackets. Raises SettingsError naming the
    problem (the same grammar as the broker's metrics.listener, broker/_config_defs.py)."""
    m = _LISTEN_RE.match((value or "").strip())
    if m is None:
        raise SettingsError(f"{value!r}: expected http://HOST:PORT")
    scheme, host, port_text = m.groups()
    if scheme.lower() != "http":
        raise SettingsError(f"{value!r}: the scheme must be http (the dashboard serves plain HTTP)")
    host = host[1:-1] if host.startswith("[") else host
    if not host:
        raise SettingsError(f"{value!r}: a host is required (0.0.0.0 binds every interface)")
    port = int(port_text)
    if port > 65535:
        raise SettingsError(f"{value!r}: the port must be between 0 and 65535")
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_client_config(path: str | None, bootstrap_servers: str) -> dict[str, Any]:
    """The AsyncAdmin config of the dashboard: the admin and security keys of the properties file at
    ``path`` (others are ignored, as the tools' --command-config does), and ``bootstrap_servers``."""
    from quafka.client import SECURITY_KEYS
    from quafka.protocol.properties import PropertiesError, parse_properties

    config: dict[str, Any] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                props = parse_properties(fh.read())
        except OSError as exc:
            raise SettingsError(f"cannot read the dashboard's client config {path}: {exc.strerror}") from None
        except PropertiesError as exc:
            raise SettingsError(f"{path}: {exc} (key {exc.key!r})") from None
        config.update({k: v for k, v in props.items() if k in _ADMIN_KEYS + tuple(SECURITY_KEYS)})
    config["bootstrap.servers"] = bootstrap_servers
    config.setdefault("client.id", "quafka-dashboard")
    return config


@dataclass(frozen=True)
class DashboardSettings:
    """``client_config``: the AsyncAdmin config it logs in with. ``listen``: http://HOST:PORT.
    ``actions_enabled``: offer redrive and force release/archive (off: read-only, every /actions/*
    answers 403). ``worker_metrics_urls``: /metrics URLs of quafka.framework workers for the workers
    page. ``allowed_hosts``: Host header values accepted besides the bound host and the loopback
    names (DNS rebinding guard). Cadences in seconds: group pages 1 s, the overview 5 s."""

    client_config: Mapping[str, Any]
    listen: str = "http://127.0.0.1:8080"
    actions_enabled: bool = False
    worker_metrics_urls: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    group_cadence_s: float = 1.0
    overview_cadence_s: float = 5.0
    keepalive_s: float = 15.0
    recent_records: int = 10  # per partition on the topic page
    value_preview_bytes: int = 1024
    key_preview_bytes: int = 256
    max_rows: int = 1000  # in-flight ranges asked per partition (the broker's maximum is 10,000)
    dead_letter_limit: int = 200  # newest letters read per DLQ partition
    history_points: int = 300  # lag-over-time samples kept per group (5 minutes at 1 s)
    mode: str = "standalone"  # or "broker" (served by the broker process): shown on the page
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise SettingsError("; ".join(problems))

    def _problems(self) -> Iterable[str]:
        if not str(self.client_config.get("bootstrap.servers", "")).strip():
            yield "the client config needs bootstrap.servers"
        try:
            parse_listen(self.listen)
        except SettingsError as exc:
            yield f"listen {exc}"
        for name in ("group_cadence_s", "overview_cadence_s", "keepalive_s"):
            if not getattr(self, name) > 0:
                yield f"{name} must be > 0, got {getattr(self, name)}"
        for name in ("recent_records", "value_preview_bytes", "key_preview_bytes", "max_rows",
                     "dead_letter_limit", "history_points"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                yield f"{name} must be an integer >= 1, got {value!r}"
        if self.max_rows > 10_000:
            yield f"max_rows must be <= 10000 (the broker's limit), got {self.max_rows}"
        for url in self.worker_metrics_urls:
            if not re.match(r"^https?://[^/\s]+(/\S*)?$", url):
                yield f"worker metrics URL {url!r} is not an http(s)://host[:port]/path URL"
        if self.mode not in ("standalone", "broker"):
            yield f"mode must be standalone or broker, got {self.mode!r}"

    @property
    def host(self) -> str:
        return parse_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return parse_listen(self.listen)[1]

    @property
    def beyond_loopback(self) -> bool:
        """Bound to an address other hosts may reach: anyone there acts as the dashboard's user."""
        return not is_loopback(self.host)
