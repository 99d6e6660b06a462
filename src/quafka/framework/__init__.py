"""quafka.framework: Karafka-style workers for share groups and consumer groups (docs/framework.md).

```python
from quafka.framework import App, Consumer

class JobConsumer(Consumer):
    def consume_one(self, message):
        handle(message.value)          # accepted when it returns; an exception retries with backoff

app = App({"bootstrap.servers": "127.0.0.1:9092"})
app.share_group("job-workers").topic("jobs", JobConsumer, concurrency=4, max_poll_records=1)
```

Run it with ``quafka worker my_module:app``.
"""

from .consumers import Consumer, ConsumerGroupConsumer, ShareGroupConsumer
from .delivery_controls import DeliveryControlsError
from .enqueue import Enqueued, EnqueueError
from .errors import ErrorInfo, ErrorRecord, describe
from .group_check import GroupConfigError
from .health import MissingTopicError
from .instrumentation import EVENTS, Event, EventBus
from .messages import Message
from .policies import Backoff, Verdict, VerdictKind
from .routing import App, Route
from .settings import ROUTE_SETTINGS, BackoffExceedsLockDuration, RouteConfigError, RouteProblem
from .supervisor import RestartPolicy, run_processes
from .worker import Worker

__all__ = [
    "App", "Backoff", "BackoffExceedsLockDuration", "Consumer", "ConsumerGroupConsumer", "DeliveryControlsError",
    "EVENTS", "EnqueueError", "Enqueued", "ErrorInfo", "ErrorRecord", "Event", "EventBus", "GroupConfigError",
    "Message", "MissingTopicError", "ROUTE_SETTINGS", "Route", "RestartPolicy", "RouteConfigError", "RouteProblem", "ShareGroupConsumer", "Verdict", "VerdictKind", "Worker",
    "describe", "run_processes",
]
