"""`quafka broker`: run the broker in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

EXAMPLES = """
examples:
  quafka broker
  quafka broker --config server.properties
  quafka broker --override log.dirs=/var/lib/quafka --override listeners=PLAINTEXT://0.0.0.0:9092
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "broker",
        help="run a quafka broker",
        description="Run a single-node Kafka-protocol broker with share groups. Configuration uses "
        "Kafka's broker config names (see docs/configuration.md).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", metavar="FILE", help="a server.properties file")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="set a config (repeatable); wins over --config")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                   help="the event loop: uvloop (the default where it is installed: less CPU per request) "
                        "or asyncio's standard loop; auto picks uvloop when it imports")
    p.set_defaults(func=run)


def run(args) -> int:
    from quafka.broker import config as cfg

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    try:
        props: dict[str, str] = {}
        if args.config:
            props.update(cfg.load_properties_file(args.config))
        for item in args.override:
            if "=" not in item:
                raise cfg.ConfigError("--override", item, "KEY=VALUE", f"--override needs KEY=VALUE, got '{item}'")
            key, value = item.split("=", 1)
            props[key.strip()] = value.strip()
        config = cfg.BrokerConfig.from_props(props)
    except cfg.ConfigError as exc:
        print(f"quafka broker: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"quafka broker: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return 1
    for warning in config.warnings:
        logging.getLogger("quafka.config").warning("%s", warning)
    raise_open_file_limit()
    from quafka.broker.server.event_loop import EventLoopUnavailable, run_on

    try:
        return run_on(args.event_loop, _serve(config))
    except EventLoopUnavailable as exc:
        print(f"quafka broker: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


def raise_open_file_limit() -> tuple[int, int] | None:
    """Raise the soft limit on open files (RLIMIT_NOFILE) to the hard limit: every client
    connection, log segment and index holds a descriptor, and the usual soft limit (1024) stops
    the broker near a thousand connections while the hard limit allows far more. Apache Kafka's
    broker gets the same from its JVM (HotSpot's MaxFDLimit, on by default, raises the soft limit
    to the hard one at start). Returns the (soft, hard) limits now in force, or None where the
    platform has no such limit; a refusal is logged and the broker runs with the limit it has."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    logger = logging.getLogger("quafka.server")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft >= hard:
        return soft, hard
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:  # Linux refuses a soft limit above fs.nr_open, and "unlimited" is above it
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
        if soft != resource.RLIM_INFINITY and soft >= target:
            return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        logger.warning("could not raise the open-file limit from %s to %s (%s): the broker holds at most about %s "
                       "connections; raise it with `ulimit -n`", soft, target, exc, soft)
        return soft, hard
    logger.info("raised the open-file limit (RLIMIT_NOFILE) from %s to %s", soft, target)
    return resource.getrlimit(resource.RLIMIT_NOFILE)


async def _serve(config) -> int:
    from quafka.broker.config import ConfigError
    from quafka.broker.server.metadata_store import MetadataStoreError
    from quafka.broker.server.server import BrokerServer

    server = BrokerServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # before start(): the port opens before the internal topics are replayed, and a SIGTERM that
    # arrives meanwhile must still stop the broker cleanly
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except (MetadataStoreError, OSError, ConfigError) as exc:  # ConfigError: a TLS store that does not load
        print(f"quafka broker: cannot start: {exc}", file=sys.stderr)
        return 1
    try:
        dashboard = await start_dashboard(server, config)
    except (OSError, ValueError) as exc:  # the port is taken; the client config file cannot be read
        print(f"quafka broker: cannot start the dashboard on {config.get('quafka.dashboard.listener')}: {exc} "
              "(choose another address with quafka.dashboard.listener, or leave it empty to turn the dashboard off; "
              "`make run DASHBOARD=` does that)", file=sys.stderr)
        await server.stop()
        return 1
    signalled = asyncio.ensure_future(stop.wait())
    stopped = asyncio.ensure_future(server.wait_stopped())
    await asyncio.wait((signalled, stopped), return_when=asyncio.FIRST_COMPLETED)
    signalled.cancel()
    if dashboard is not None:
        await dashboard.close()
    if server.halted:  # the log directory failed: the broker stopped itself, as Kafka halts
        failed = server.failed_log_dir
        print(f"quafka broker: stopped: log directory {failed.path} failed ({failed.where}: {failed.failure})",
              file=sys.stderr)
        await server.stop()
        return 1
    stopped.cancel()
    logging.getLogger("quafka.server").info("shutting down")
    await server.stop()
    return 0


def _dashboard_bootstrap(server, config, security_protocol: str) -> str:
    """host:port of the broker's first listener speaking ``security_protocol`` (its advertised
    address; a wildcard bind is reached over loopback)."""
    for listener in config.listeners:
        if listener.security_protocol == security_protocol:
            host, port = server.state.endpoint_for(listener.name)
            if host in ("", "0.0.0.0", "::"):
                host = "127.0.0.1"
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    raise ValueError(f"no {security_protocol} listener for the dashboard to connect to (listeners: "
                     f"{', '.join(str(lst) for lst in config.listeners)}); set bootstrap.servers in "
                     "quafka.dashboard.client.config")


async def start_dashboard(server, config):
    """The web dashboard on the broker's own loop when quafka.dashboard.listener is set (None when
    not): a client of this broker (docs/dashboard.md) logging in with quafka.dashboard.client.config,
    else over the first PLAINTEXT listener. Logs its URL."""
    listen = config.get("quafka.dashboard.listener")
    if not listen:
        return None
    from quafka.dashboard.server import DashboardServer
    from quafka.dashboard.settings import DashboardSettings, load_client_config

    path = config.get("quafka.dashboard.client.config") or None
    client = load_client_config(path, "")
    client["bootstrap.servers"] = _file_bootstrap(path) or _dashboard_bootstrap(
        server, config, str(client.get("security.protocol", "PLAINTEXT")).upper())
    settings = DashboardSettings(client, listen=listen, mode="broker",
                                 actions_enabled=bool(config.get("quafka.dashboard.actions.enable")),
                                 worker_metrics_urls=tuple(config.get("quafka.dashboard.worker.metrics.urls") or ()))
    dashboard = await DashboardServer(settings).start()
    logging.getLogger("quafka.server").info("dashboard: %s", dashboard.url)
    return dashboard


def _file_bootstrap(path: str | None) -> str | None:
    if not path:
        return None
    from quafka.protocol.properties import parse_properties

    with open(path, encoding="utf-8") as fh:
        return parse_properties(fh.read()).get("bootstrap.servers") or None
