"""The request handlers, one module per API family; each registers itself with
`registry.handles` when imported. `load_handlers` imports them all: it lives here, above the
handlers, so that the registry the handlers import does not import them back."""

from __future__ import annotations

from ..registry import REGISTRY, HandlerSpec

__all__ = ["advertised_ranges", "load_handlers"]


def load_handlers() -> dict[int, HandlerSpec]:
    """Import every handler module (each registers itself) and return the registry."""
    from . import (  # noqa: F401
        acls,
        api_versions,
        classic_group,
        client_quotas,
        cluster,
        config_resources,
        configs,
        consumer_group,
        consumer_offsets,
        describe_topic_partitions,
        features,
        fetch,
        in_flight,
        log_dirs,
        metadata,
        offsets,
        producers,
        produce,
        quorum,
        replicas,
        sasl,
        scram_credentials,
        share_fetch,
        share_group,
        share_offsets,
        topics,
    )

    return REGISTRY


def advertised_ranges() -> list[tuple[int, int, int]]:
    return sorted((s.api_key, s.min_version, s.max_version) for s in load_handlers().values())
