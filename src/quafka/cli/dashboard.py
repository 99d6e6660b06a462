"""`quafka dashboard`: the web dashboard, standalone, against any quafka or Apache Kafka cluster.

The same dashboard the broker serves on ``quafka.dashboard.listener`` (docs/dashboard.md), run in
its own process: it logs in with --bootstrap-server and --command-config (a client properties file:
security.protocol, sasl.*, ssl.*), so every page and action is authorized by the brokers as that
principal. Against Apache Kafka the panels that need quafka's extension APIs say so.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from ._common import DEFAULT_BOOTSTRAP, add_bootstrap

EXAMPLES = """
examples:
  quafka dashboard                                  # 127.0.0.1:9092, served on http://127.0.0.1:8080/
  quafka dashboard --bootstrap-server kafka:9092 --command-config admin.properties
  quafka dashboard --listen http://127.0.0.1:0      # any free port (the URL is printed)
  quafka dashboard --enable-actions --worker-metrics http://127.0.0.1:9300/metrics

Read-only unless --enable-actions: then redrive and force release/archive are offered, each
behind a confirmation page showing the dry run. Bound beyond 127.0.0.1, anyone who reaches the
port acts as the --command-config login: keep it on loopback or behind an authenticating proxy.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "dashboard",
        help="serve the web dashboard against a quafka or Kafka cluster",
        description="Serve quafka's web dashboard (overview, topics, share groups with their in-flight "
                    "window, consumer groups, dead letters, workers) for a cluster, as a client of it. "
                    "The broker can serve the same dashboard itself: quafka.dashboard.listener.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bootstrap(p)
    p.add_argument("--listen", default="http://127.0.0.1:8080", metavar="http://HOST:PORT",
                   help="where to serve the dashboard (default http://127.0.0.1:8080; port 0: any free port)")
    p.add_argument("--enable-actions", action="store_true",
                   help="offer redrive and force release/archive (default: read-only; every action URL answers 403)")
    p.add_argument("--worker-metrics", action="append", default=[], metavar="URL",
                   help="a quafka.framework worker's /metrics URL for the workers page (repeatable)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a Host header to accept besides the bound address and the loopback names, e.g. the "
                        "name a proxy forwards (repeatable; others are refused: DNS rebinding)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                   help="the event loop (as quafka broker's option)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from quafka.dashboard.settings import DashboardSettings, SettingsError, load_client_config

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    try:
        client = load_client_config(args.command_config, args.bootstrap_server or DEFAULT_BOOTSTRAP)
        settings = DashboardSettings(client, listen=args.listen, actions_enabled=args.enable_actions,
                                     worker_metrics_urls=tuple(args.worker_metrics),
                                     allowed_hosts=tuple(args.allowed_host), mode="standalone")
    except SettingsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    from quafka.broker.server.event_loop import EventLoopUnavailable, run_on

    try:
        return run_on(args.event_loop, _serve(settings))
    except EventLoopUnavailable as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


async def _serve(settings) -> int:
    from quafka.dashboard.server import DashboardServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = DashboardServer(settings)
    try:
        await server.start()
    except OSError as exc:
        print(f"Error: cannot serve the dashboard on {settings.listen}: {exc}", file=sys.stderr)
        return 1
    print(f"quafka dashboard: {server.url} (cluster {settings.client_config['bootstrap.servers']}; "
          f"{'actions on' if settings.actions_enabled else 'read-only'})", flush=True)
    await stop.wait()
    await server.close()
    return 0
