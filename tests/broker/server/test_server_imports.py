"""broker/server has no import cycle through `BrokerServer` (issue 28): the services are annotated
with narrow protocols (`_services.BrokerServices` and each service's own) that `BrokerServer`
satisfies, and the handler registry does not import the handlers back.

The import graph is grimp's (import-linter's engine), TYPE_CHECKING imports included; the protocols
are checked against a running broker, member by member (no static type checker runs here)."""

from __future__ import annotations

import grimp
import pytest

from quafka import EmbeddedBroker
from quafka.broker.server import (
    _services,
    connection,
    consumer_groups,
    consumer_offsets,
    group_kinds,
    metrics,
    share_groups,
    share_partitions,
)

PACKAGE = "quafka.broker.server"
# share_partitions and the two helpers it builds (annotated with ShareContext / SharePartitionManager):
# the one cycle left, and it does not run through the server
KNOWN_CYCLE = {f"{PACKAGE}.share_partitions", f"{PACKAGE}.dead_letter_writer", f"{PACKAGE}.delivery_controls"}
PROTOCOLS = [_services.BrokerServices, share_partitions.SharePartitionsBroker, share_groups.ShareGroupsBroker,
             consumer_groups.ConsumerGroupsBroker, consumer_offsets.ConsumerOffsetsBroker,
             group_kinds.GroupCoordinators, connection.RequestBroker, metrics.MetricsSource]


def cycles(graph, modules: set[str]) -> list[set[str]]:
    """The strongly connected components (more than one module) of the import graph on `modules`."""
    edges = {m: [i for i in graph.find_modules_directly_imported_by(m) if i in modules] for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return found


def test_no_import_cycle_runs_through_the_server():
    graph = grimp.build_graph("quafka", cache_dir=None)  # TYPE_CHECKING imports count
    modules = {m for m in graph.modules if m.startswith(PACKAGE + ".")}
    assert len(modules) > 30
    found = cycles(graph, modules)
    assert found == [KNOWN_CYCLE], sorted(sorted(c) for c in found)
    importers = {m for m in modules if f"{PACKAGE}.server" in graph.find_modules_directly_imported_by(m)}
    assert importers == {f"{PACKAGE}.embedded"}  # only the embedded broker, which runs one


def _members(protocol: type) -> set[str]:
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object,) or cls.__name__ in ("Protocol", "Generic"):
            continue
        names |= set(getattr(cls, "__annotations__", {}))
        names |= {n for n, v in vars(cls).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=[p.__qualname__ for p in PROTOCOLS])
def test_the_broker_has_every_member_of_each_protocol(protocol):
    members = _members(protocol)
    assert members, protocol
    with EmbeddedBroker() as broker:
        missing = sorted(name for name in members if not hasattr(broker.server, name))
    assert not missing, f"{protocol.__qualname__}: BrokerServer has no {missing}"
