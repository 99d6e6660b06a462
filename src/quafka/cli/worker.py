"""`quafka worker APP`: run a quafka.framework app's routes, as `karafka server` runs Karafka's.

APP is ``module:attribute`` (attribute ``app`` when left out), imported with the current directory
on the path. The routes are validated before anything connects. SIGTERM or SIGINT stops
gracefully (running jobs finish within --shutdown-timeout; what did not start is released); a
second signal forces. With --processes N the command starts N worker processes and passes the
signals on.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from ._common import ToolError, print_table, run_tool

EXAMPLES = """
examples:
  quafka worker examples.job_processor:app
  quafka worker examples.job_processor:app --processes 4 --concurrency 4
  quafka worker myapp:app --include-routes 'job-workers/*' --metrics-port 9400
  quafka worker myapp:app --bootstrap-server kafka-1:9092,kafka-2:9092
  quafka worker myapp:app --list-routes
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "worker",
        help="run a quafka.framework app's workers (share-group and consumer-group routes)",
        description="Run the routes of a quafka.framework App: validate them, start the workers, log "
                    "progress, stop gracefully on SIGTERM/SIGINT.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("app", metavar="APP", help="the app to run, as module:attribute (attribute default: app)")
    p.add_argument("--include-routes", action="append", default=[], metavar="PATTERN",
                   help="run only routes matching this group/topic glob or group name (repeatable)")
    p.add_argument("--concurrency", type=int, metavar="N", help="workers per route in each process "
                                                                "(default: each route's concurrency setting)")
    p.add_argument("--processes", type=int, default=1, metavar="N", help="worker processes to run (default 1)")
    p.add_argument("--shutdown-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long running jobs may take to finish after SIGTERM (default 30)")
    p.add_argument("--log-interval", type=float, default=10.0, metavar="SECONDS",
                   help="seconds between progress log lines (default 10)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics on this port (process i of --processes uses PORT+i; "
                        "0: a free port each, logged)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="the address the metrics endpoint listens on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="connect here instead of the app's bootstrap.servers")
    p.add_argument("--list-routes", action="store_true", help="print the validated routes and exit")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run)


def load_app(spec: str):
    from quafka.framework import App

    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise ToolError(f"APP {spec!r}: expected module:attribute, e.g. examples.job_processor:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolError(f"cannot import {module_name!r} ({exc}); run from the directory that holds it") from exc
    app = getattr(module, attribute or "app", None)
    if not isinstance(app, App):
        raise ToolError(f"{module_name}.{attribute or 'app'} is not a quafka.framework.App (got {type(app).__name__})")
    return app


def run(args: argparse.Namespace) -> int:
    return run_tool("worker", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from quafka.framework import RouteConfigError, Worker, run_processes

    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = load_app(args.app)
    if args.bootstrap_server:
        app.kafka["bootstrap.servers"] = args.bootstrap_server
    if args.processes < 1:
        raise ToolError(f"--processes must be >= 1, got {args.processes}")
    if args.concurrency is not None and args.concurrency < 1:
        raise ToolError(f"--concurrency must be >= 1, got {args.concurrency}")
    if args.log_interval <= 0:
        raise ToolError(f"--log-interval must be > 0 seconds, got {args.log_interval}")
    if args.shutdown_timeout < 0:
        raise ToolError(f"--shutdown-timeout must be >= 0 seconds, got {args.shutdown_timeout}")
    try:
        routes = app.routes(args.include_routes)
    except RouteConfigError as exc:
        raise ToolError(str(exc)) from exc
    if args.list_routes:
        print_table(["ROUTE", "TYPE", "CONSUMER", "CONCURRENCY", "MAX-POLL-RECORDS", "DEAD-LETTER-TOPIC"],
                    [[r.name, r.group_type, r.consumer.__qualname__, str(args.concurrency or r.settings["concurrency"]),
                      str(r.settings["max_poll_records"]), r.settings["dead_letter_topic"] or "-"] for r in routes])
        return 0
    if args.processes > 1:
        argv = _child_argv(args)
        return run_processes(argv, args.processes)
    index = int(os.environ.get("QUAFKA_WORKER_INDEX", "0"))
    metrics_port = None if args.metrics_port is None else args.metrics_port + (index if args.metrics_port else 0)
    worker = Worker(app, include_routes=args.include_routes, concurrency=args.concurrency,
                    shutdown_timeout_s=args.shutdown_timeout, log_interval_s=args.log_interval,
                    metrics_port=metrics_port, metrics_host=args.metrics_host)
    status = worker.run()
    sys.stdout.flush()
    sys.stderr.flush()
    if status != 0:
        os._exit(status)  # a forced stop: threads still inside jobs are abandoned
    return status


def _child_argv(args: argparse.Namespace) -> list[str]:
    argv = ["worker", args.app, "--processes", "1", "--shutdown-timeout", str(args.shutdown_timeout),
            "--log-interval", str(args.log_interval), "--log-level", args.log_level]
    for pattern in args.include_routes:
        argv += ["--include-routes", pattern]
    if args.concurrency is not None:
        argv += ["--concurrency", str(args.concurrency)]
    if args.metrics_port is not None:
        argv += ["--metrics-port", str(args.metrics_port), "--metrics-host", args.metrics_host]
    if args.bootstrap_server:
        argv += ["--bootstrap-server", args.bootstrap_server]
    return argv
