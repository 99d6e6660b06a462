"""The handler registry: one entry per API key with the version range it serves.

Handlers register with `@handles(api_key, min_version, max_version)`; ApiVersions is computed from
this registry (intersected with the versions kio has schemas for), so what is advertised is
exactly what is implemented. `quafka.broker.server.handlers.load_handlers` imports every handler
module (so that each registers) and returns the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

Handler = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler


REGISTRY: dict[int, HandlerSpec] = {}


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if api_key in REGISTRY:
            raise RuntimeError(f"API key {api_key} registered twice")
        REGISTRY[api_key] = HandlerSpec(api_key, min_version, max_version, fn)
        return fn

    return register
