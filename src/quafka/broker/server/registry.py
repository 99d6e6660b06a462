"""The handler registry: one entry per API key with the version range it serves.

Handlers register with `@handles(api_key, min_version, max_version)`; ApiVersions is computed from
this registry (intersected with the versions kio has schemas for), so what is advertised is
exactly what is implemented.
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


def load_handlers() -> dict[int, HandlerSpec]:
    """Import every handler module (each registers itself) and return the registry."""
    from .handlers import (  # noqa: F401
        api_versions,
        classic_group,
        cluster,
        configs,
        consumer_group,
        consumer_offsets,
        features,
        fetch,
        in_flight,
        metadata,
        offsets,
        produce,
        share_fetch,
        share_group,
        share_offsets,
        topics,
    )

    return REGISTRY


def advertised_ranges() -> list[tuple[int, int, int]]:
    return sorted((s.api_key, s.min_version, s.max_version) for s in load_handlers().values())
