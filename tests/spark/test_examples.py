"""The shipped pipelines in examples/ run in-process against an embedded broker: the job pipeline
writes one result per job to Parquet and to the results topic; the poison audit reports exactly the
records the group archived without accepting."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from quafka import EmbeddedBroker
from quafka.client import AcknowledgeType, Admin, ShareConsumer

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str):
    module_name = f"quafka_example_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b.bootstrap_servers


def setup(bootstrap: str, topics: list[str], group: str, **group_config: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({t: (1, 1) for t in topics})
        admin.alter_configs("group", group, {"share.auto.offset.reset": "earliest",
                                             "share.assignment.interval.ms": "0", **group_config})


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=v)
    assert producer.flush(30) == 0


def test_job_pipeline_writes_one_result_per_job(spark, broker, tmp_path):
    pipeline = load_example("job_pipeline")
    suffix = uuid.uuid4().hex[:8]
    topic, results_topic, group = f"jobs-{suffix}", f"results-{suffix}", f"workers-{suffix}"
    setup(broker, [topic, results_topic], group)
    n = 40
    jobs = {i: [i, i + 1, 2 * i] for i in range(n)}
    produce(broker, topic, [json.dumps({"id": i, "numbers": nums}).encode() for i, nums in jobs.items()])
    output = tmp_path / "results.parquet"

    written = pipeline.main(["--bootstrap-server", broker, "--topic", topic, "--group", group,
                             "--results-topic", results_topic, "--output", str(output),
                             "--checkpoint", str(tmp_path / "ckpt"), "--available-now",
                             "--timeout", "45"], spark=spark)

    assert written == n
    rows = spark.read.parquet(str(output)).collect()
    assert sorted(r.id for r in rows) == list(range(n))
    for r in rows:
        assert r.error is None
        assert (r.items, r.total, r.maximum) == (3, float(sum(jobs[r.id])), float(max(jobs[r.id])))
    back = (spark.read.format("quafka").option("kafka.bootstrap.servers", broker)
            .option("subscribe", results_topic).load().collect())
    assert sorted(int(r.key) for r in back) == list(range(n))
    for r in back:
        result = json.loads(r.value)
        assert result["id"] == int(r.key) and result["total"] == float(sum(jobs[result["id"]]))
    with Admin({"bootstrap.servers": broker}) as admin:
        assert admin.list_share_group_offsets(group, [topic])[(topic, 0)] == (n, 0)


def test_poison_audit_reports_exactly_the_archived_records(spark, broker):
    audit = load_example("poison_audit")
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"work-{suffix}", f"audit-{suffix}"
    setup(broker, [topic], group, **{"share.delivery.count.limit": "2"})
    base = {"bootstrap.servers": broker, "group.id": group, "share.acknowledgement.mode": "explicit"}
    # Offset 0 stays acquired and unacknowledged by `holder` for the whole test, so the group's start
    # offset stays at 0 and the per-offset state of everything after it is kept (see the example's
    # docstring for this limit).
    produce(broker, topic, [b"held"])
    with ShareConsumer({**base, "share.acquire.mode": "record_limit", "max.poll.records": 1}) as holder:
        holder.subscribe([topic])
        held: list = []
        deadline = time.monotonic() + 20
        while not held and time.monotonic() < deadline:
            held = holder.poll(0.5)
        assert [r.offset for r in held] == [0]

        values = [b"ok", b"reject", b"ok", b"release", b"ok", b"reject", b"ok", b"ok"]  # offsets 1..8
        produce(broker, topic, values)
        rejected = {1 + i for i, v in enumerate(values) if v == b"reject"}
        released = {1 + i for i, v in enumerate(values) if v == b"release"}
        done: set[int] = set()
        with ShareConsumer(base) as worker:
            worker.subscribe([topic])
            deadline = time.monotonic() + 30
            while len(done) < len(values) and time.monotonic() < deadline:
                records = worker.poll(0.5)
                for r in records:
                    if r.offset in rejected:
                        worker.acknowledge(r, AcknowledgeType.REJECT)
                        done.add(r.offset)
                    elif r.offset in released:
                        worker.acknowledge(r, AcknowledgeType.RELEASE)  # archived at the 2nd delivery
                        if r.delivery_count >= 2:
                            done.add(r.offset)
                    else:
                        worker.acknowledge(r, AcknowledgeType.ACCEPT)
                        done.add(r.offset)
                if records:
                    assert all(e is None for e in worker.commit_sync(10).values())
            assert done == set(range(1, len(values) + 1))

        expected = sorted((topic, 0, o) for o in rejected | released)
        argv = ["--bootstrap-server", broker, "--group", group, "--topic", topic]
        deadline = time.monotonic() + 20
        found = audit.main(argv, spark=spark)
        while found != expected and time.monotonic() < deadline:
            time.sleep(0.5)
            found = audit.main(argv, spark=spark)
        assert found == expected
        with Admin({"bootstrap.servers": broker}) as admin:
            assert admin.list_share_group_offsets(group, [topic])[(topic, 0)][0] == 0
