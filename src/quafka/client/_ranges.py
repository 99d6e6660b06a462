"""A map from disjoint ranges of offsets to values (sans-I/O, used by the acknowledgement book).

``RangeMap`` holds disjoint inclusive ranges ``[first, last]``, each with one value, sorted by
offset in three parallel lists (firsts, lasts, values) searched with ``bisect``. Two ranges that
touch (``last + 1 == next first``) never share a value: every change merges such neighbours, so a
run of offsets with one value is always one range and the structure's size is the number of runs,
not of offsets.

Every operation finds its place by binary search and then works on the ranges it touches:
O(log n + k) Python steps for n ranges and k ranges touched, never a step per offset. (Splicing a
Python list moves the tail of the list in C, which is what a sorted-list structure costs; with the
few ranges a partition has between two polls it is negligible.) Values are compared with ``==``;
a value object without ``__eq__`` (the book's record runs) merges only with itself.

The offset count of the whole map is kept up to date, so ``count`` is O(1).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["RangeMap"]

Piece = tuple[int, int, Any]


class RangeMap:
    """Disjoint ``[first, last]`` offset ranges with a value each; see the module docstring."""

    __slots__ = ("_firsts", "_lasts", "_values", "_count")

    def __init__(self, ranges: Iterable[Piece] = ()) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []
        self._values: list[Any] = []
        self._count = 0
        for first, last, value in ranges:
            self.assign(first, last, value)

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        """The number of ranges."""
        return len(self._firsts)

    def __bool__(self) -> bool:
        return bool(self._firsts)

    @property
    def count(self) -> int:
        """The number of offsets in all ranges."""
        return self._count

    def __iter__(self) -> Iterator[Piece]:
        """``(first, last, value)`` of every range in offset order (do not change the map meanwhile;
        ``ranges()`` gives a list that allows it)."""
        return zip(self._firsts, self._lasts, self._values)

    def ranges(self, first: int | None = None, last: int | None = None) -> list[Piece]:
        """``(first, last, value)`` of the ranges overlapping ``first..last`` (None: unbounded),
        clipped to it."""
        fs, ls, vs = self._firsts, self._lasts, self._values
        if first is None and last is None:
            return list(zip(fs, ls, vs))
        i = 0 if first is None else bisect_left(ls, first)
        j = len(fs) if last is None else bisect_right(fs, last)
        out = list(zip(fs[i:j], ls[i:j], vs[i:j]))
        if out:
            if first is not None and out[0][0] < first:
                out[0] = (first, *out[0][1:])
            if last is not None and out[-1][1] > last:
                f, _l, v = out[-1]
                out[-1] = (f, last, v)
        return out

    def get(self, offset: int, default: Any = None) -> Any:
        """The value at ``offset``, or ``default`` when no range holds it."""
        i = bisect_right(self._firsts, offset) - 1
        if i >= 0 and self._lasts[i] >= offset:
            return self._values[i]
        return default

    def __contains__(self, offset: int) -> bool:
        i = bisect_right(self._firsts, offset) - 1
        return i >= 0 and self._lasts[i] >= offset

    def first_gap(self, first: int, last: int) -> int | None:
        """The lowest offset of ``first..last`` that no range holds, or None when all are held."""
        fs, ls = self._firsts, self._lasts
        i = bisect_right(fs, first) - 1
        if i < 0 or ls[i] < first:
            return first
        position, n = ls[i] + 1, len(fs)
        i += 1
        while position <= last:
            if i < n and fs[i] == position:
                position = ls[i] + 1
                i += 1
            else:
                return position
        return None

    def covers(self, first: int, last: int) -> bool:
        """Whether every offset of ``first..last`` is in some range."""
        return self.first_gap(first, last) is None

    def __repr__(self) -> str:
        return f"RangeMap({self.ranges()!r})"

    # ------------------------------------------------------------------ changing

    def assign(self, first: int, last: int, value: Any) -> None:
        """Every offset of ``first..last`` gets ``value`` (ranges split at the edges, equal
        neighbours merged)."""
        if last < first:
            return

        def rebuild(old: list[Piece]) -> list[Piece]:
            out = []
            tail = None
            for f, l, v in old:
                if f < first:
                    out.append((f, min(l, first - 1), v))
                if l > last:
                    tail = (max(f, last + 1), l, v)
            out.append((first, last, value))
            if tail is not None:
                out.append(tail)
            return out

        self._splice(first, last, rebuild)

    def fill(self, first: int, last: int, value: Any) -> None:
        """The offsets of ``first..last`` that no range holds get ``value``; held ones keep theirs."""
        if last < first:
            return

        def rebuild(old: list[Piece]) -> list[Piece]:
            out = []
            position = first  # the lowest offset of first..last not yet placed
            for f, l, v in old:
                if f > position and position <= last:
                    out.append((position, min(f - 1, last), value))
                out.append((f, l, v))
                position = max(position, l + 1)
            if position <= last:
                out.append((position, last, value))
            return out

        self._splice(first, last, rebuild)

    def remove(self, first: int, last: int) -> None:
        """Forget the offsets ``first..last`` (ranges split at the edges)."""
        if last < first:
            return

        def rebuild(old: list[Piece]) -> list[Piece]:
            out = []
            for f, l, v in old:
                if f < first:
                    out.append((f, min(l, first - 1), v))
                if l > last:
                    out.append((max(f, last + 1), l, v))
            return out

        self._splice(first, last, rebuild)

    def replace(self, old_value: Any, new_value: Any) -> None:
        """Every range holding ``old_value`` gets ``new_value`` (one pass over the ranges)."""
        if old_value not in self._values:
            return
        pieces = [(f, l, new_value if v == old_value else v) for f, l, v in self]
        merged = _merged(pieces)
        self._firsts = [p[0] for p in merged]
        self._lasts = [p[1] for p in merged]
        self._values = [p[2] for p in merged]

    def clear(self) -> None:
        self._firsts.clear()
        self._lasts.clear()
        self._values.clear()
        self._count = 0

    def _splice(self, first: int, last: int, rebuild: Callable[[list[Piece]], list[Piece]]) -> None:
        """Replace the ranges overlapping or touching ``first..last`` by ``rebuild(them)``, merged."""
        fs, ls, vs = self._firsts, self._lasts, self._values
        i = bisect_left(ls, first - 1)  # the first range ending at or after first - 1
        j = bisect_right(fs, last + 1)  # past the last range starting at or before last + 1
        old = list(zip(fs[i:j], ls[i:j], vs[i:j]))
        new = _merged(rebuild(old))
        fs[i:j] = [p[0] for p in new]
        ls[i:j] = [p[1] for p in new]
        vs[i:j] = [p[2] for p in new]
        self._count += sum(l - f + 1 for f, l, _ in new) - sum(l - f + 1 for f, l, _ in old)


def _merged(pieces: list[Piece]) -> list[Piece]:
    """Sorted disjoint pieces with touching neighbours of equal value joined."""
    out: list[Piece] = []
    for piece in pieces:
        if out:
            f, l, v = out[-1]
            if l + 1 == piece[0] and v == piece[2]:
                out[-1] = (f, piece[1], v)
                continue
        out.append(piece)
    return out
