"""The broker's `fetch.max.bytes` caps a Fetch and a ShareFetch response whatever MaxBytes the
client asks for (Kafka: `KafkaApis.handleFetchRequest` and `handleShareFetchRequest` take
min(request MaxBytes, config.fetchMaxBytes)). Issue 28's load run
found a client that stops reading pinned a whole 50 MiB response per connection; with the cap it
pins at most fetch.max.bytes (plus one batch)."""

from __future__ import annotations

from quafka.broker.server.embedded import EmbeddedBroker
from quafka.protocol.record_batch import build_batch
from support import RawClient
from support.share_client import ShareClient, create_topic, records_in

from .test_produce_fetch_edges import fetch12, produce_req

CAP = 64 * 1024
BATCH_VALUE = b"x" * 10_000  # ~10 KB per batch; 40 batches = ~400 KB in the log


def test_fetch_and_share_fetch_responses_are_capped_by_fetch_max_bytes():
    with EmbeddedBroker(config={"fetch.max.bytes": CAP}) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "big", 1)
        member = ShareClient(bootstrap, "g")
        member.join(["big"])
        member.wait_for_assignment()
        assert member.fetch(max_wait_ms=0).error_code == 0  # the share partition starts at the log end
        with RawClient(bootstrap) as raw:
            for i in range(40):
                resp = raw.request(produce_req("big", build_batch([(None, BATCH_VALUE)], base_timestamp=i + 1)))
                assert resp.responses[0].partition_responses[0].error_code == 0
            fetched = raw.request(fetch12("big", 0, max_bytes=50 << 20, partition_max_bytes=50 << 20))
        data = fetched.responses[0].partitions[0].records
        assert 0 < len(data) <= CAP + len(BATCH_VALUE) + 200, len(data)  # the cap, or one batch past it
        assert len(data) < 40 * len(BATCH_VALUE)  # without the cap: the whole log
        got = records_in(member.fetch(max_wait_ms=0, max_bytes=50 << 20, max_records=10_000))
        [(_, records)] = got.items()
        assert 0 < len(records) * len(BATCH_VALUE) <= CAP + len(BATCH_VALUE), len(records)
        member.close()
