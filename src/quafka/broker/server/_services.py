"""What the broker's services use of the broker, as a protocol: the narrow type of the `server`
they are given.

`BrokerServer` builds the services (share partitions, share coordinator, the group coordinators,
the dead-letter writer, the connections) and hands each of them itself; annotated with
`BrokerServer`, every service imported the module that imports every service, and the 30-odd
modules of broker/server formed one import cycle. A service annotates with `BrokerServices` (what
they all use: the broker state, the flusher, the counters, the timers) or with a protocol of its
own that adds the other services it calls, imported from modules below it. `BrokerServer`
satisfies them all structurally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from quafka.broker.storage import LogDirHealth

    from .flusher import LogFlusher
    from .metrics import BrokerMetrics
    from .state import BrokerState
    from .timers import TimerService


class BrokerServices(Protocol):
    """The broker as every service sees it."""

    state: BrokerState
    flusher: LogFlusher
    metrics: BrokerMetrics
    timers: TimerService

    def on_log_dir_failure(self, health: LogDirHealth) -> None: ...
