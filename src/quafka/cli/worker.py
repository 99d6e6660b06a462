"""`quafka worker APP`: run a quafka.framework app's routes, as `karafka server` runs Karafka's.

APP is ``module:attribute`` (attribute ``app`` when left out), imported with the current directory
on the path. The routes are validated before anything connects. SIGTERM or SIGINT stops
gracefully (running jobs finish within --shutdown-timeout; what did not start is released); a
second signal forces. With --processes N the command supervises N worker processes
(quafka.framework.supervisor): it passes the signals on, restarts one that dies (--restart-delay,
--max-restarts, --restart-window), and the children stop when it is gone.
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
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="worker processes to run and supervise (default 1): one that dies is restarted")
    p.add_argument("--restart-delay", type=float, metavar="SECONDS",
                   help="with --processes > 1: wait before restarting a worker process that died, doubled for "
                        "each further restart within --restart-window, up to 30 (default 1)")
    p.add_argument("--max-restarts", type=int, metavar="N",
                   help="with --processes > 1: a worker process restarted more often than this within "
                        "--restart-window stops every process with status 3 (default 5; 0: never restart)")
    p.add_argument("--restart-window", type=float, metavar="SECONDS",
                   help="the window --max-restarts counts restarts in (default 60)")
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
    p.add_argument("--strict", action="store_true",
                   help="refuse to start when a route's topic does not exist (default: a warning at start and "
                        "every minute)")
    p.add_argument("--apply-group-configs", action="store_true",
                   help="set the group configs the routes declare (group_configs={...}) on their groups at start, "
                        "printing the diff first (default: a warning for each difference)")
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
    from quafka.framework import RestartPolicy, RouteConfigError, Worker, run_processes
    from quafka.framework.group_check import GroupConfigError, group_config_problems
    from quafka.framework.health import MissingTopicError

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
    restart = {"--restart-delay": args.restart_delay, "--max-restarts": args.max_restarts,
               "--restart-window": args.restart_window}
    given = [name for name, value in restart.items() if value is not None]
    if given and args.processes == 1:
        raise ToolError(f"{', '.join(given)}: only with --processes 2 or more (one process is not supervised; "
                        f"leave its restarts to the service manager)")
    if args.restart_delay is not None and not args.restart_delay >= 0:
        raise ToolError(f"--restart-delay must be >= 0 seconds, got {args.restart_delay}")
    if args.max_restarts is not None and args.max_restarts < 0:
        raise ToolError(f"--max-restarts must be >= 0, got {args.max_restarts}")
    if args.restart_window is not None and not args.restart_window > 0:
        raise ToolError(f"--restart-window must be > 0 seconds, got {args.restart_window}")
    try:
        routes = app.routes(args.include_routes)
    except RouteConfigError as exc:
        raise ToolError(str(exc)) from exc
    problems = group_config_problems(routes)  # routes of one group declaring different group configs
    if problems:
        raise ToolError(str(RouteConfigError(problems)))
    if args.list_routes:
        print_table(["ROUTE", "TYPE", "CONSUMER", "CONCURRENCY", "MAX-POLL-RECORDS", "DEAD-LETTER-TOPIC"],
                    [[r.name, r.group_type, r.consumer.__qualname__, str(args.concurrency or r.settings["concurrency"]),
                      str(r.settings["max_poll_records"]), r.settings["dead_letter_topic"] or "-"] for r in routes])
        return 0
    if args.processes > 1:
        argv = _child_argv(args)
        default = RestartPolicy()  # for what is not given
        return run_processes(
            argv, args.processes, shutdown_timeout_s=args.shutdown_timeout,
            restart_delay_s=default.restart_delay_s if args.restart_delay is None else args.restart_delay,
            max_restarts=default.max_restarts if args.max_restarts is None else args.max_restarts,
            restart_window_s=default.restart_window_s if args.restart_window is None else args.restart_window)
    index = int(os.environ.get("QUAFKA_WORKER_INDEX", "0"))
    metrics_port = None if args.metrics_port is None else args.metrics_port + (index if args.metrics_port else 0)
    worker = Worker(app, include_routes=args.include_routes, concurrency=args.concurrency,
                    shutdown_timeout_s=args.shutdown_timeout, log_interval_s=args.log_interval,
                    metrics_port=metrics_port, metrics_host=args.metrics_host, strict=args.strict,
                    apply_group_configs=args.apply_group_configs)
    try:
        status = worker.run()
    except (MissingTopicError, GroupConfigError, RouteConfigError) as exc:  # refused at start, before the workers
        raise ToolError(str(exc)) from exc
    sys.stdout.flush()
    sys.stderr.flush()
    if status != 0:
        os._exit(status)  # a forced stop: threads still inside jobs are abandoned (the pool's processes were ended)
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
    argv += ["--strict"] * args.strict + ["--apply-group-configs"] * args.apply_group_configs
    return argv
