"""The broker's event loop: uvloop where it is installed, asyncio's standard loop otherwise.

uvloop (libuv under asyncio's API) spends less CPU per request than the standard loop's selector
and transports; the job-queue round (one record per request) is where it counts
(docs/benchmarks.md, "One job, one request"). It is a dependency on the platforms it has wheels
for; where it cannot be installed (Windows, some PyPy builds) `auto` falls back to the standard
loop and says so once in the log. `--event-loop asyncio` picks the standard loop on purpose.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("quafka.broker")

CHOICES = ("auto", "uvloop", "asyncio")


class EventLoopUnavailable(Exception):
    """`uvloop` was asked for and does not import."""


def loop_factory(choice: str = "auto"):
    """A callable making a new event loop for `choice` ("auto", "uvloop" or "asyncio"), and the
    name of the loop it makes."""
    if choice not in CHOICES:
        raise ValueError(f"event loop {choice!r}: choose one of {', '.join(CHOICES)}")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError as exc:
            if choice == "uvloop":
                raise EventLoopUnavailable(f"--event-loop uvloop: uvloop does not import ({exc})") from None
            log.info("uvloop is not installed (%s): the broker runs on asyncio's standard loop", exc)
        else:
            return uvloop.new_event_loop, "uvloop"
    return asyncio.new_event_loop, "asyncio"


def run_on(choice: str, main: Coroutine[Any, Any, int]) -> int:
    """Run `main` to completion on a new loop of `choice`, as asyncio.run does."""
    try:
        factory, name = loop_factory(choice)
    except BaseException:
        main.close()
        raise
    log.info("event loop: %s", name)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
