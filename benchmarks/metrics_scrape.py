"""The cost of one metrics scrape: quafka's text writer (broker/server/metrics.py) against
prometheus_client's exposition (a custom collector over the same counters), for a broker with
`--partitions` share partitions (three per-partition families, as SharePartitionMetrics) and
request metrics for 40 APIs x 3 versions. A scrape runs on the broker's event loop, so its cost
is a pause of every request; issue 18 asked for prometheus_client if it costs no more.

    .venv/bin/python benchmarks/metrics_scrape.py [--partitions 1000] [--scrapes 50]

Needs prometheus-client (the [test] extra).
"""

from __future__ import annotations

import argparse
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from quafka.broker.server.metrics import _Writer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000, help="share partitions (default 1000)")
    ap.add_argument("--scrapes", type=int, default=50, help="scrapes timed per exposition (default 50)")
    args = ap.parse_args()
    parts = [(("group", f"g{i % 10}"), ("topic", f"t{i // 10}"), ("partition", i % 7)) for i in range(args.partitions)]
    requests = [((("request", f"Api{k}"), ("version", v)), k * 10 + v) for k in range(40) for v in range(3)]
    families = ("acquisitionlocktimeout_total", "inflightmessagecount", "inflightbatchcount")

    def quafka_writer() -> bytes:
        out = _Writer()
        out.family("kafka_network_requestmetrics_requests_total", "counter", "Requests.", requests)
        for name in families:
            out.family("kafka_server_sharepartitionmetrics_" + name,
                       "counter" if name.endswith("_total") else "gauge", "Help.", [(labels, 5) for labels in parts])
        return out.text().encode()

    class Collector:
        def collect(self):
            family = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests.",
                                         labels=["request", "version"])
            for labels, value in requests:
                family.add_metric([str(v) for _, v in labels], value)
            yield family
            for name in families:
                counter = name.endswith("_total")
                cls = CounterMetricFamily if counter else GaugeMetricFamily
                family = cls("kafka_server_sharepartitionmetrics_" + name.removesuffix("_total"), "Help.",
                             labels=["group", "topic", "partition"])
                for labels in parts:
                    family.add_metric([str(v) for _, v in labels], 5)
                yield family

    registry = CollectorRegistry()
    registry.register(Collector())

    def prometheus_client() -> bytes:
        return generate_latest(registry)

    samples = len(requests) + len(families) * len(parts)
    print(f"{samples:,} samples per scrape, {args.scrapes} scrapes each")
    print("| exposition | ms per scrape | bytes |")
    print("|---|---:|---:|")
    for fn in (quafka_writer, prometheus_client):
        fn()
        started = time.perf_counter()
        for _ in range(args.scrapes):
            body = fn()
        print(f"| {fn.__name__} | {(time.perf_counter() - started) / args.scrapes * 1000:.2f} | {len(body):,} |")


if __name__ == "__main__":
    main()
