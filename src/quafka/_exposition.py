"""The Prometheus text exposition format 0.0.4, written by hand (no prometheus_client on the hot
path: docs/benchmarks.md, "metrics scrape"). Shared by the broker's metrics endpoint
(broker/server/metrics.py) and the worker framework's (framework/metrics.py); outside the layers,
it imports nothing from quafka."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["CONTENT_TYPE", "TextWriter", "escape_label", "number"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = tuple[tuple[str, object], ...]


def escape_label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: Iterable[tuple[str, object]]) -> str:
    parts = [f'{k}="{escape_label(v)}"' for k, v in labels]
    return "{" + ",".join(parts) + "}" if parts else ""


class TextWriter:
    """Metric families, one after the other; ``text()`` is the exposition."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, type_: str, help_: str, samples: Iterable[tuple[Labels, float]]) -> None:
        self.lines.append(f"# HELP {name} {_escape_help(help_)}")
        self.lines.append(f"# TYPE {name} {type_}")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {number(value)}")

    def histogram(self, name: str, help_: str,
                  series: Iterable[tuple[Labels, Sequence[float], Sequence[int], float]]) -> None:
        """``series``: (labels, bucket upper bounds, counts per bucket with the +Inf overflow last, sum)."""
        self.lines.append(f"# HELP {name} {_escape_help(help_)}")
        self.lines.append(f"# TYPE {name} histogram")
        for labels, bounds, counts, total in series:
            cumulative = 0
            for bound, n in zip(bounds, counts):
                cumulative += n
                self.lines.append(f"{name}_bucket{_labels(labels + (('le', number(float(bound))),))} {cumulative}")
            count = cumulative + counts[len(bounds)]
            self.lines.append(f"{name}_bucket{_labels(labels + (('le', '+Inf'),))} {count}")
            self.lines.append(f"{name}_sum{_labels(labels)} {number(float(total))}")
            self.lines.append(f"{name}_count{_labels(labels)} {count}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
