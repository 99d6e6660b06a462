"""A small deterministic maximum flow (Dinic's algorithm) for the share assignor.

Nodes are integers 0..n-1; edges are explored in the order they were added, so the flow found (not
only its value) depends only on the order of the `add_edge` calls. The depth-first search is
iterative: residual paths may be as long as the graph is large.
"""

from __future__ import annotations

__all__ = ["MaxFlow"]


class MaxFlow:
    def __init__(self, nodes: int) -> None:
        # graph[u] = list of edges [to, residual capacity, index of the reverse edge in graph[to]]
        self.graph: list[list[list[int]]] = [[] for _ in range(nodes)]
        self._capacity: dict[tuple[int, int], int] = {}

    def add_node(self) -> int:
        self.graph.append([])
        return len(self.graph) - 1

    def add_edge(self, u: int, v: int, capacity: int) -> tuple[int, int]:
        """An edge u -> v; returns its handle for `flow`."""
        self.graph[u].append([v, capacity, len(self.graph[v])])
        self.graph[v].append([u, 0, len(self.graph[u]) - 1])
        handle = (u, len(self.graph[u]) - 1)
        self._capacity[handle] = capacity
        return handle

    def flow(self, handle: tuple[int, int]) -> int:
        """The flow now on the edge `add_edge` returned `handle` for."""
        u, i = handle
        return self._capacity[handle] - self.graph[u][i][1]

    def max_flow(self, source: int, sink: int) -> int:
        """Augment from `source` to `sink` until no residual path is left; returns the flow added."""
        graph = self.graph
        total = 0
        while True:
            level = [-1] * len(graph)
            level[source] = 0
            queue = [source]
            for u in queue:  # breadth-first: the level graph
                for v, cap, _rev in graph[u]:
                    if cap > 0 and level[v] < 0:
                        level[v] = level[u] + 1
                        queue.append(v)
            if level[sink] < 0:
                return total
            pointer = [0] * len(graph)
            while True:  # blocking flow: one shortest augmenting path at a time
                path: list[tuple[int, int]] = []
                u = source
                while u != sink:
                    edges = graph[u]
                    i = pointer[u]
                    while i < len(edges) and not (edges[i][1] > 0 and level[edges[i][0]] == level[u] + 1):
                        i += 1
                    pointer[u] = i
                    if i < len(edges):
                        path.append((u, i))
                        u = edges[i][0]
                    elif u == source:
                        break
                    else:  # dead end: never visit u again in this phase, step back
                        level[u] = -1
                        u, _ = path.pop()
                        pointer[u] += 1
                if u != sink:
                    break
                push = min(graph[a][i][1] for a, i in path)
                for a, i in path:
                    edge = graph[a][i]
                    edge[1] -= push
                    graph[edge[0]][edge[2]][1] += push
                total += push
