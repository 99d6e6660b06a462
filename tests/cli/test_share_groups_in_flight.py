"""`quafka share-groups --describe --in-flight`, "where is my record" (`--offset`) and the force
actions `--release` / `--archive` end to end against an embedded broker (quafka's API extension),
on scenarios set up with quafka's ShareConsumer: two consumers holding records, a record released
into a long redelivery backoff, one waiting for its delivery time, acknowledged and archived
records, a dead-lettered one, and a key-ordered group with a parked key."""

from __future__ import annotations

import datetime
import json
import re
import time

import pytest

from cli.helpers import cli, make_topic, run_quafka
from support import set_group_configs, wait_until
from support.dlq import DLQ_TOPIC_CONFIGS, produce
from support.share_client import create_topic

from quafka.client import AcknowledgeType, Admin, ExtensionUnavailable, ShareConsumer
from quafka.protocol.errors import ErrorCode

BACKOFF_MS = 600_000       # a released record waits 10 minutes
DELIVER_AFTER_MS = 3_600_000  # a delayed record waits an hour
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def consumer(bootstrap, group, client_id, max_records):
    """An explicit-mode consumer that acquires at most `max_records` records per fetch."""
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                          "share.acknowledgement.mode": "explicit", "share.acquire.mode": "record_limit",
                          "max.poll.records": max_records})


def poll_until(c, count, timeout_s=10.0):
    got = []
    wait_until(lambda: got.extend(c.poll(0.2)) or len(got) >= count, timeout_s, message=f"{count} records")
    return got


def acknowledge(c, records, kind=AcknowledgeType.ACCEPT):
    for r in records:
        c.acknowledge(r, kind)
    return c.commit_sync()


def columns(block):
    """A table's rows as dicts: cells are cut at the header's column starts (cells may hold spaces)."""
    lines = block.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    names = lines[0].split()
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        rows.append(dict(zip(names, cells)))
    return rows


def blocks(out):
    """The output's paragraphs (separated by blank lines)."""
    assert out.startswith("\n"), repr(out)
    return out.strip("\n").split("\n\n")


def iso_ms(text):
    return int(datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
               .replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)


def stable(rows):
    """The JSON rows without what moves with the clock (lock time left; a due time only as there or not:
    the broker turns it into wall time on each call, which may move it by a millisecond)."""
    return [{**{k: v for k, v in r.items() if k not in ("lock_remaining_ms", "due_in_ms", "due_at", "due_at_ms")},
             "due": r["due_at_ms"] is not None} for r in rows]


def window_json(capsys, bs, group, topic=None):
    extra = ["--topic", topic, "--partition", "0"] if topic else []
    code, out, err = cli(capsys, "share-groups", "--bootstrap-server", bs, "--describe", "--in-flight",
                         "--group", group, *extra, "--output", "json")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def where(capsys, bs, group, topic, offset, *extra):
    code, out, err = cli(capsys, "share-groups", "--bootstrap-server", bs, "--describe", "--in-flight", "--group",
                         group, "--topic", topic, "--partition", "0", "--offset", str(offset), *extra)
    assert (code, err) == (0, ""), err
    return out


# ----------------------------------------------------------------------------- holders, backoff, delivery time

def test_holders_backoff_delivery_time_where_is_my_record_and_force_release(bootstrap, capsys):
    bs = bootstrap
    sg = ["share-groups", "--bootstrap-server", bs]
    make_topic(bs, "jobs")
    set_group_configs(bs, "g", {"share.auto.offset.reset": "earliest", "share.assignment.interval.ms": "0",
                                "quafka.share.redelivery.backoff.ms": str(BACKOFF_MS),
                                "quafka.share.delivery.delay.enable": "true"})
    produced_ms = int(time.time() * 1000)
    produce(bs, "jobs", [(None, b"v%d" % i, [("quafka.deliver.after.ms", str(DELIVER_AFTER_MS).encode())]
                          if i == 6 else []) for i in range(10)])
    produced_by_ms = int(time.time() * 1000)
    a, b = consumer(bs, "g", "worker-a", 3), consumer(bs, "g", "worker-b", 5)
    try:
        a.subscribe(["jobs"])
        held_a = poll_until(a, 3)
        b.subscribe(["jobs"])
        held_b = poll_until(b, 5)
        assert [r.offset for r in held_a] == [0, 1, 2]
        assert [r.offset for r in held_b] == [3, 4, 5, 7, 8]  # 6 waits for its delivery time
        released_ms = int(time.time() * 1000)
        b.acknowledge(held_b[0], AcknowledgeType.ACCEPT)
        b.acknowledge(held_b[1], AcknowledgeType.REJECT)
        b.acknowledge(held_b[2], AcknowledgeType.RELEASE)
        assert all(e is None for e in b.commit_sync().values())
        released_by_ms = int(time.time() * 1000)

        # the window: what each consumer holds, the settled records, the waiting ones and why
        code, out, err = cli(capsys, *sg, "--describe", "--in-flight", "--group", "g")
        assert (code, err) == (0, "")
        header, table = blocks(out)
        assert header.splitlines() == [
            "Share partition jobs-0 of group 'g': start offset 0, end offset 8, log start offset 0, log end offset 10",
            "In flight 9 of 2000 record locks; waiting 1 for backoff, 1 for delivery time; blocked 0; "
            "key ordering off"]
        assert table.splitlines()[0].split() == ["OFFSETS", "STATE", "DELIVERIES", "HOLDER", "LOCK-LEFT", "DUE", "WAIT"]
        rows = columns(table)
        assert [(r["OFFSETS"], r["STATE"], r["DELIVERIES"], r["HOLDER"], r["WAIT"]) for r in rows] == [
            ("0-2", "ACQUIRED", "1", f"{a.member_id} (worker-a@127.0.0.1)", "-"),
            ("3", "ACKNOWLEDGED", "1", "-", "-"),
            ("4", "ARCHIVED", "1", "-", "-"),
            ("5", "AVAILABLE", "1", "-", "backoff"),
            ("6", "AVAILABLE", "0", "-", "delivery-time"),
            ("7-8", "ACQUIRED", "1", f"{b.member_id} (worker-b@127.0.0.1)", "-")]
        for r in (rows[0], rows[5]):
            assert re.fullmatch(r"\d+\.\ds", r["LOCK-LEFT"]) and 0 < float(r["LOCK-LEFT"][:-1]) <= 30.0
        assert [r["LOCK-LEFT"] for r in rows[1:5]] == ["-"] * 4
        backoff_due = re.fullmatch(rf"in 9m\d\ds \(({ISO})\)", rows[3]["DUE"])
        assert backoff_due, rows[3]["DUE"]
        # (the broker's due times are its clock's, turned into wall time: a millisecond or two of slack)
        assert released_ms + BACKOFF_MS - 5 <= iso_ms(backoff_due.group(1)) <= released_by_ms + BACKOFF_MS + 5
        delivery_due = re.fullmatch(rf"in (59m\d\ds|1h00m) \(({ISO})\)", rows[4]["DUE"])
        assert delivery_due, rows[4]["DUE"]
        assert produced_ms - 5 <= iso_ms(delivery_due.group(2)) - DELIVER_AFTER_MS <= produced_by_ms + 5
        assert [r["DUE"] for r in rows[:3] + rows[5:]] == ["-"] * 4

        # JSON: the same, whole
        [view] = window_json(capsys, bs, "g")
        assert (view["start_offset"], view["end_offset"], view["log_end_offset"], view["in_flight_count"],
                view["waiting_backoff_count"], view["waiting_delivery_count"], view["key_ordering"],
                view["dead_letter_topic"], view["truncated"]) == (0, 8, 10, 9, 1, 1, False, None, False)
        assert view["rows"][0]["member_id"] == a.member_id and view["rows"][0]["client_id"] == "worker-a"
        assert 0 < view["rows"][0]["lock_remaining_ms"] <= 30_000
        assert view["rows"][3]["wait_reason"] == "backoff"
        assert abs(view["rows"][3]["due_at_ms"] - iso_ms(backoff_due.group(1))) <= 5

        # --max-rows cuts the table and says so
        code, out, _ = cli(capsys, *sg, "--describe", "--in-flight", "--group", "g", "--topic", "jobs",
                           "--max-rows", "2")
        *table, cut = blocks(out)[1].splitlines()
        assert [r["OFFSETS"] for r in columns("\n".join(table))] == ["0-2", "3"]
        assert cut == "Only the first 2 rows are shown: more records are in flight (--max-rows, at most 10000)."

        # where is my record
        out = where(capsys, bs, "g", "jobs", 1)
        first, *details = out.splitlines()
        assert re.fullmatch(rf"Offset 1 of jobs-0 \(share group 'g'\): in flight, held by {a.member_id} "
                            rf"\(worker-a@127\.0\.0\.1\), lock left \d+\.\ds\.", first), first
        assert details[:3] == ["  state      ACQUIRED", "  deliveries 1",
                               f"  holder     {a.member_id} (worker-a@127.0.0.1)"]
        assert re.fullmatch(r"  lock left  \d+\.\ds", details[3]) and details[4:7] == [
            "  due        -", "  wait       -", "  key        -"]
        assert where(capsys, bs, "g", "jobs", 3).splitlines()[0] == (
            "Offset 3 of jobs-0 (share group 'g'): acknowledged (settled; the start offset has not passed it yet).")
        assert where(capsys, bs, "g", "jobs", 4).splitlines()[:2] == [
            "Offset 4 of jobs-0 (share group 'g'): archived (settled; the start offset has not passed it yet).",
            "  state      ARCHIVED"]
        waits = re.fullmatch(rf"Offset 5 of jobs-0 \(share group 'g'\): in flight, available; it waits for its "
                             rf"redelivery backoff: due in 9m\d\ds \(({ISO})\)\.",
                             where(capsys, bs, "g", "jobs", 5).splitlines()[0])
        assert waits and abs(iso_ms(waits.group(1)) - iso_ms(backoff_due.group(1))) <= 5
        assert where(capsys, bs, "g", "jobs", 9) == (
            "Offset 9 of jobs-0 (share group 'g'): not delivered yet: it waits to be fetched (past the end offset 8; "
            "the log end offset is 10).\n")
        assert where(capsys, bs, "g", "jobs", 10) == (
            "Offset 10 of jobs-0 (share group 'g'): no such record yet: the log end offset is 10 (the next record "
            "produced gets that offset).\n")
        answer = json.loads(where(capsys, bs, "g", "jobs", 4, "--output", "json"))
        assert (answer["where"], answer["row"]["state"], answer["dead_letter"]) == ("archived", "ARCHIVED", None)

        # a dry run shows what would change and changes nothing
        before = window_json(capsys, bs, "g")[0]["rows"]
        code, out, err = cli(capsys, *sg, "--release", "--group", "g", "--topic", "jobs", "--partition", "0",
                             "--offsets", "0-9")
        assert (code, err) == (0, "")
        table, summary = blocks(out)
        assert [r["OFFSETS"] for r in columns(table)] == ["0-2", "3", "4", "5", "6", "7-8"]
        assert summary == (
            "Dry run: 7 record(s) of jobs-0 (offsets 0-9) in share group 'g' would be released: deliverable at once. "
            "2 would be skipped (settled, on their way to the dead-letter queue, or being written); 1 not fetched yet "
            "(nothing holds them). Nothing was changed (add --execute to apply).")
        assert stable(window_json(capsys, bs, "g")[0]["rows"]) == stable(before)
        code, out, _ = cli(capsys, *sg, "--archive", "--group", "g", "--topic", "jobs", "--partition", "0",
                           "--offsets", "2", "--dry-run")
        assert code == 0 and blocks(out)[-1].startswith(
            "Dry run: 1 record(s) of jobs-0 (offset 2) in share group 'g' would be archived: no dead letter is "
            "written (the group has no dead-letter queue).")
        assert stable(window_json(capsys, bs, "g")[0]["rows"]) == stable(before)

        # force release: worker-a's records and the one in its 10-minute backoff are deliverable at once
        code, out, _ = cli(capsys, *sg, "--release", "--group", "g", "--topic", "jobs", "--partition", "0",
                           "--offsets", "0-2", "--execute")
        table, summary = blocks(out)
        assert code == 0 and [(r["OFFSETS"], r["STATE"], r["HOLDER"]) for r in columns(table)] == [
            ("0-2", "AVAILABLE", "-")]
        assert summary == ("Released 3 record(s) of jobs-0 (offsets 0-2) in share group 'g': deliverable at once. "
                           "Skipped 0 (settled, on their way to the dead-letter queue, or being written); 0 not "
                           "fetched yet (nothing holds them).")
        code, out, _ = cli(capsys, *sg, "--release", "--group", "g", "--topic", "jobs", "--partition", "0",
                           "--offsets", "5", "--reset-delivery-count", "--execute")
        assert code == 0 and [(r["OFFSETS"], r["STATE"], r["DELIVERIES"], r["DUE"], r["WAIT"])
                              for r in columns(blocks(out)[0])] == [("5", "AVAILABLE", "0", "-", "-")]
        assert all(e is None for e in acknowledge(b, held_b[3:]).values())
        again = poll_until(b, 5, timeout_s=5.0)  # at once: the backoff had ten minutes left
        assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2), (2, 2), (5, 1), (9, 1)]
        # worker-a lost its locks: its acknowledgement is refused, as after a lock expiry
        a.acknowledge(held_a[0], AcknowledgeType.ACCEPT)
        [error] = a.commit_sync().values()
        assert error is not None and error.code == ErrorCode.invalid_record_state

        # force archive of a record worker-b now holds (no DLQ: archived at once)
        code, out, _ = cli(capsys, *sg, "--archive", "--group", "g", "--topic", "jobs", "--partition", "0",
                           "--offsets", "1", "--execute")
        assert code == 0 and [(r["OFFSETS"], r["STATE"]) for r in columns(blocks(out)[0])] == [("1", "ARCHIVED")]
        assert blocks(out)[1].startswith("Archived 1 record(s) of jobs-0 (offset 1) in share group 'g': no dead "
                                         "letter is written (the group has no dead-letter queue).")
        assert where(capsys, bs, "g", "jobs", 1).splitlines()[0].endswith("archived (settled; the start offset has "
                                                                          "not passed it yet).")
    finally:
        a.close()
        b.close()


# ----------------------------------------------------------------------------- dead letters

def test_dead_lettered_settled_deleted_and_force_archive_to_the_dlq(bootstrap, capsys):
    bs = bootstrap
    sg = ["share-groups", "--bootstrap-server", bs]
    make_topic(bs, "orders")
    create_topic(bs, "dlq.orders", 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bs, "gd", {"share.auto.offset.reset": "earliest",
                                 "errors.deadletterqueue.topic.name": "dlq.orders"})
    produce(bs, "orders", [(None, b"o%d" % i, []) for i in range(6)])
    c = consumer(bs, "gd", "worker", 4)
    try:
        c.subscribe(["orders"])
        held = poll_until(c, 4)
        assert [r.offset for r in held] == [0, 1, 2, 3]
        c.acknowledge(held[0], AcknowledgeType.ACCEPT)
        c.acknowledge(held[1], AcknowledgeType.REJECT)
        c.acknowledge(held[2], AcknowledgeType.ACCEPT)
        assert all(e is None for e in c.commit_sync().values())
        wait_until(lambda: window_json(capsys, bs, "gd")[0]["start_offset"] == 3, message="start offset 3")

        code, out, _ = cli(capsys, *sg, "--describe", "--in-flight", "--group", "gd")
        header, table = blocks(out)
        assert header.splitlines()[1].endswith("key ordering off; dead-letter queue dlq.orders")
        assert [(r["OFFSETS"], r["STATE"], r["HOLDER"]) for r in columns(table)] == [
            ("3", "ACQUIRED", f"{c.member_id} (worker@127.0.0.1)")]

        # where is my record, below the start offset: the DLQ tells a dead letter from the rest
        [letter] = [x for x in json.loads(cli(capsys, *sg, "--dead-letters", "--group", "gd", "--output", "json")[1])]
        assert (letter["offset"], letter["reason"], letter["dlq_offset"]) == (1, "rejected", 0)
        assert where(capsys, bs, "gd", "orders", 1) == (
            f"Offset 1 of orders-0 (share group 'gd'): dead-lettered to dlq.orders partition 0 offset 0 at "
            f"{letter['died_at']}, reason rejected, delivery count 1 (settled: below the start offset 3).\n")
        assert where(capsys, bs, "gd", "orders", 0) == (
            "Offset 0 of orders-0 (share group 'gd'): settled: acknowledged or archived (it is below the share "
            "partition's start offset 3, where the broker no longer keeps which); the dead-letter queue dlq.orders "
            "holds no dead letter for it.\n")
        answer = json.loads(where(capsys, bs, "gd", "orders", 1, "--output", "json"))
        assert answer["where"] == "dead-lettered" and answer["dead_letter"]["dlq_offset"] == 0
        assert where(capsys, bs, "gd", "orders", 4).startswith("Offset 4 of orders-0 (share group 'gd'): not "
                                                               "delivered yet")

        # --archive says the records go to the DLQ; a dry run changes nothing
        code, out, _ = cli(capsys, *sg, "--archive", "--group", "gd", "--topic", "orders", "--partition", "0",
                           "--offsets", "3")
        assert code == 0 and blocks(out)[-1] == (
            "Dry run: 1 record(s) of orders-0 (offset 3) in share group 'gd' would be archived: written to the "
            "dead-letter queue dlq.orders first (reason force-archived). 0 would be skipped (settled, on their way "
            "to the dead-letter queue, or being written); 0 not fetched yet (nothing holds them). Nothing was "
            "changed (add --execute to apply).")
        assert window_json(capsys, bs, "gd")[0]["rows"][0]["state"] == "ACQUIRED"
        code, out, _ = cli(capsys, *sg, "--archive", "--group", "gd", "--topic", "orders", "--partition", "0",
                           "--offsets", "3", "--execute")
        assert code == 0 and blocks(out)[-1].startswith(
            "Archived 1 record(s) of orders-0 (offset 3) in share group 'gd': written to the dead-letter queue "
            "dlq.orders first (reason force-archived).")
        letters = wait_until(lambda: [x for x in json.loads(cli(capsys, *sg, "--dead-letters", "--group", "gd",
                                                                "--output", "json")[1]) if x["offset"] == 3],
                             message="the force-archived dead letter")
        assert [(x["reason"], x["delivery_count"], x["dlq_offset"]) for x in letters] == [("force-archived", 1, 1)]
        assert wait_until(lambda: "force-archived" in where(capsys, bs, "gd", "orders", 3)) and where(
            capsys, bs, "gd", "orders", 3).startswith(
            "Offset 3 of orders-0 (share group 'gd'): dead-lettered to dlq.orders partition 0 offset 1 at ")

        # records deleted from the log since: still settled (or dead-lettered), and deleted
        with Admin({"bootstrap.servers": bs}) as admin:
            admin.delete_records({("orders", 0): 2})
        assert where(capsys, bs, "gd", "orders", 0).endswith(
            "holds no dead letter for it; and deleted from the log since (below the log start offset 2: retention or "
            "delete-records).\n")
        assert where(capsys, bs, "gd", "orders", 1).startswith(
            "Offset 1 of orders-0 (share group 'gd'): dead-lettered to dlq.orders partition 0 offset 0 at ")
    finally:
        c.close()


# ----------------------------------------------------------------------------- key ordering

def test_key_ordering_shows_keys_and_failed_keys_and_release_key_lets_the_key_flow(bootstrap, capsys):
    bs = bootstrap
    sg = ["share-groups", "--bootstrap-server", bs]
    force = [*sg, "--release", "--group", "gk", "--topic", "keyed", "--partition", "0"]
    make_topic(bs, "keyed")
    set_group_configs(bs, "gk", {"share.auto.offset.reset": "earliest", "quafka.share.key.ordering": "true",
                                 "quafka.share.key.ordering.on.failure": "park"})
    long_key = b"customer-" * 5
    produce(bs, "keyed", [(b"a", b"0", []), (b"b", b"1", []), (b"a", b"2", []), (b"\x00\xff", b"3", []),
                          (None, b"4", []), (b"a", b"5", []), (long_key, b"6", [])])
    c = consumer(bs, "gk", "keyed-worker", 10)
    try:
        c.subscribe(["keyed"])
        held = poll_until(c, 5)
        assert [r.offset for r in held] == [0, 1, 3, 4, 6]  # 2 and 5 wait behind 0 (key a)
        c.acknowledge(held[0], AcknowledgeType.REJECT)  # key a fails: its later records are parked
        c.acknowledge(held[1], AcknowledgeType.ACCEPT)
        assert all(e is None for e in c.commit_sync().values())

        code, out, _ = cli(capsys, *sg, "--describe", "--in-flight", "--group", "gk")
        header, table, note, failed = blocks(out)
        assert header.splitlines()[1] == ("In flight 5 of 2000 record locks; waiting 0 for backoff, 0 for delivery "
                                          "time; blocked 2; key ordering on")
        rows = columns(table)
        assert list(rows[0])[-1] == "KEY"
        assert [(r["OFFSETS"], r["STATE"], r["DELIVERIES"], r["WAIT"], r["KEY"]) for r in rows] == [
            ("2", "AVAILABLE", "0", "key-failed", "a"),
            ("3", "ACQUIRED", "1", "-", "0x00ff"),
            ("4", "ACQUIRED", "1", "-", "-"),
            ("5", "AVAILABLE", "0", "key-failed", "a"),
            ("6", "ACQUIRED", "1", "-", "customer-customer-customer-cu...")]
        assert note.startswith("Failed keys (key ordering): their records wait until the key is released")
        assert columns(failed) == [{"KEY": "a", "FAILED-AT": "0", "WAITING-OFFSETS": "2,5"}]
        [view] = window_json(capsys, bs, "gk")
        assert [r["key"] for r in view["rows"]] == ["a", {"base64": "AP8="}, None, "a", long_key.decode()]
        assert view["failed_keys"] == [{"key": "a", "failed_offset": 0, "waiting_offsets": [2, 5]}]
        assert where(capsys, bs, "gk", "keyed", 2).splitlines()[0] == (
            "Offset 2 of keyed-0 (share group 'gk'): in flight, available but blocked: its key failed (key ordering); "
            "it waits until the key is released with --release --key.")
        assert "  key        a" in where(capsys, bs, "gk", "keyed", 2).splitlines()
        assert where(capsys, bs, "gk", "keyed", 0).startswith("Offset 0 of keyed-0 (share group 'gk'): settled: "
                                                              "acknowledged or archived")

        # --release --key: a dry run, then a key that is not failed is refused
        code, out, _ = cli(capsys, *force, "--key", "a")
        failed_table, summary = blocks(out)
        assert code == 0 and columns(failed_table) == [{"KEY": "a", "FAILED-AT": "0", "WAITING-OFFSETS": "2,5"}]
        assert summary == ("Dry run: key 'a' of keyed-0 in share group 'gk' is failed; releasing it would let its next "
                           "record (offset 2) be delivered again. Nothing was changed (add --execute to apply).")
        assert window_json(capsys, bs, "gk")[0]["failed_keys"] == view["failed_keys"]
        assert cli(capsys, *force, "--key-hex", "0x00ff", "--execute") == (
            1, "", "Error: Key 0x00ff is not failed (parked or dead-lettering) in keyed-0 of share group 'gk' (its "
                   "failed keys: 'a'): there is nothing to release.\n")

        # released, the key's next record is delivered at once; the one after it waits behind it
        assert all(e is None for e in acknowledge(c, held[2:]).values())
        code, out, _ = cli(capsys, *force, "--key", "a", "--execute")
        assert code == 0 and blocks(out)[-1] == ("Released key 'a' of keyed-0 in share group 'gk': its next record "
                                                 "(offset 2) can be delivered again.")
        [record] = poll_until(c, 1, timeout_s=5.0)
        assert (record.offset, record.key) == (2, b"a")
        [view] = window_json(capsys, bs, "gk")
        assert view["failed_keys"] == []
        assert [(r["first_offset"], r["last_offset"], r["state"], r["blocked"]) for r in view["rows"]] == [
            (2, 2, "ACQUIRED", False), (3, 4, "ACKNOWLEDGED", False), (5, 5, "AVAILABLE", True),
            (6, 6, "ACKNOWLEDGED", False)]
        code, out, _ = cli(capsys, *sg, "--describe", "--in-flight", "--group", "gk")
        assert [(r["OFFSETS"], r["WAIT"]) for r in columns(blocks(out)[1]) if r["OFFSETS"] == "5"] == [
            ("5", "behind-key")]
    finally:
        c.close()


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("options, error", [
    (["--release", "--group", "g", "--topic", "t", "--partition", "0", "--offsets", "9-3"],
     "Invalid offset range '9-3': expected A-B with 0 <= A <= B (offsets of the partition, both included), e.g. "
     "100-120, or one offset"),
    (["--release", "--group", "g", "--topic", "t", "--offsets", "1-2"],
     "Option --release takes the option: --partition (it changes one share partition at a time)"),
    (["--release", "--group", "g", "--topic", "t", "--partition", "0"],
     "Option --release takes one of these options: --key, --key-hex, --offsets"),
    (["--release", "--group", "g", "--topic", "t", "--partition", "0", "--offsets", "--execute"],
     "Option --offsets of --release takes a range of offsets, e.g. --offsets 100-120"),
    (["--release", "--group", "g", "--topic", "t", "--partition", "0", "--offsets", "1-2", "--key", "a"],
     "Option --offsets can't be used with option --key"),
    (["--release", "--group", "g", "--topic", "t", "--partition", "0", "--key", "a", "--key-hex", "61"],
     "Option --key can't be used with option --key-hex"),
    (["--release", "--group", "g", "--topic", "t", "--partition", "0", "--key-hex", "zz"],
     "Invalid --key-hex 'zz': expected an even number of hexadecimal digits, e.g. 00ff or 0x00ff"),
    (["--release", "--group", "g", "--topic", "t", "--partition", "0", "--key", "a", "--reset-delivery-count"],
     "Option --reset-delivery-count can only be used with --release --offsets"),
    (["--release", "--group", "g", "--partition", "0", "--offsets", "1"],
     "Option --release takes the options: --topic, --partition (one share partition)"),
    (["--release", "--topic", "t", "--partition", "0", "--offsets", "1"], "Option --release takes the option: --group"),
    (["--release", "--group", "g", "--topic", "t", "--partition", "0", "--offsets", "1", "--dry-run", "--execute"],
     "Option --release only accepts one of --execute and --dry-run"),
    (["--archive", "--group", "g", "--topic", "t", "--partition", "0"], "Option --archive takes the option: --offsets"),
    (["--archive", "--group", "g", "--topic", "t", "--partition", "0", "--key", "a"],
     "Option --key can only be used with --release"),
    (["--archive", "--group", "g", "--topic", "t", "--partition", "0", "--offsets", "1", "--export"],
     "Option --export can only be used with --reset-offsets"),
    (["--describe", "--in-flight", "--group", "g", "--offset", "3"],
     "Option --offset takes the options: --topic, --partition (one share partition)"),
    (["--describe", "--in-flight", "--group", "g", "--topic", "t", "--partition", "0", "--offset", "-1"],
     "Invalid offset -1: offsets are numbered from 0"),
    (["--describe", "--in-flight", "--group", "g", "--partition", "0"], "Option --partition takes exactly one --topic"),
    (["--describe", "--group", "g", "--partition", "0"],
     "Option --partition can only be used with --describe --in-flight, --release or --archive"),
    (["--describe", "--group", "g", "--output", "json"],
     "Option --output can only be used with --dead-letters or --describe --in-flight"),
    (["--describe", "--in-flight", "--all-groups"], "Option --in-flight supports one share group at a time: --group"),
    (["--describe", "--in-flight", "--members", "--group", "g"],
     "Option --describe takes at most one of these options: --in-flight, --members, --offsets, --state"),
    (["--describe", "--in-flight", "--group", "g", "--max-rows", "0"], "--max-rows must be 1 to 10000, not 0"),
    (["--list", "--in-flight"], "Option --in-flight can only be used with --describe"),
    (["--describe", "--group", "g", "--release"],
     "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets, "
     "--dead-letters, --redrive, --release, --archive."),
])
def test_in_flight_option_errors(capsys, options, error):
    # the options are checked before any connection: no broker is needed
    assert cli(capsys, "share-groups", "--bootstrap-server", "127.0.0.1:1", *options) == (1, "", f"Error: {error}\n")


def test_missing_group_partition_and_the_subprocess_exit_codes(bootstrap, capsys):
    bs = bootstrap
    make_topic(bs, "few")
    set_group_configs(bs, "gf", {"share.auto.offset.reset": "earliest"})
    produce(bs, "few", [(None, b"x", [])])
    c = consumer(bs, "gf", "w", 1)
    try:
        c.subscribe(["few"])
        poll_until(c, 1)
    finally:
        c.close()  # its record goes back to AVAILABLE
    sg = ["share-groups", "--bootstrap-server", bs]
    assert cli(capsys, *sg, "--describe", "--in-flight", "--group", "ghost") == (
        1, "", "Error: Share group 'ghost' does not exist.\n")
    assert cli(capsys, *sg, "--release", "--group", "ghost", "--topic", "few", "--partition", "0",
               "--offsets", "0") == (1, "", "Error: Share group 'ghost' does not exist.\n")
    code, out, err = cli(capsys, *sg, "--describe", "--in-flight", "--group", "gf", "--topic", "few",
                         "--partition", "3")
    assert (code, out) == (1, "") and err.startswith("Error: ") and err.endswith("topic few has no partition 3\n")
    # a real process: a dry run exits 0 and changes nothing; --execute applies
    done = run_quafka(*sg, "--release", "--group", "gf", "--topic", "few", "--partition", "0", "--offsets", "0",
                      "--reset-delivery-count")
    assert (done.returncode, done.stderr) == (0, "") and "Dry run: 1 record(s)" in done.stdout
    assert window_json(capsys, bs, "gf")[0]["rows"][0]["delivery_count"] == 1
    done = run_quafka(*sg, "--release", "--group", "gf", "--topic", "few", "--partition", "0", "--offsets", "0",
                      "--reset-delivery-count", "--execute")
    assert (done.returncode, done.stderr) == (0, "") and done.stdout.strip().splitlines()[-1].startswith(
        "Released 1 record(s) of few-0 (offset 0) in share group 'gf'")
    assert window_json(capsys, bs, "gf")[0]["rows"][0]["delivery_count"] == 0
    done = run_quafka(*sg, "--archive", "--group", "gf", "--topic", "few", "--partition", "0", "--offsets", "4-2")
    assert (done.returncode, done.stdout) == (1, "") and done.stderr.startswith("Error: Invalid offset range '4-2'")


@pytest.mark.parametrize("options", [
    ["--describe", "--in-flight", "--group", "g"],
    ["--describe", "--in-flight", "--group", "g", "--topic", "t", "--partition", "0", "--offset", "5"],
    ["--release", "--group", "g", "--topic", "t", "--partition", "0", "--offsets", "1-2", "--execute"],
    ["--release", "--group", "g", "--topic", "t", "--partition", "0", "--key", "k"],
    ["--archive", "--group", "g", "--topic", "t", "--partition", "0", "--offsets", "1"],
])
def test_without_the_extension_one_line_says_a_quafka_broker_is_needed(bootstrap, capsys, monkeypatch, options):
    """Against a broker that does not serve quafka's API extension (Apache Kafka) the Admin raises
    ExtensionUnavailable before sending anything. The tests own no Apache Kafka broker, so the
    Admin's two methods are made to raise it here (the Admin's own check of ApiVersions is the
    client's to test); what is tested is the tool's answer: that one line, exit code 1."""
    def unavailable(what):
        def raise_it(self, *args, **kwargs):
            raise ExtensionUnavailable(what, bootstrap)
        return raise_it

    monkeypatch.setattr(Admin, "describe_in_flight", unavailable("describing in-flight records"))
    monkeypatch.setattr(Admin, "alter_in_flight", unavailable("a force release"))
    code, out, err = cli(capsys, "share-groups", "--bootstrap-server", bootstrap, *options)
    assert (code, out) == (1, "")
    assert re.fullmatch(rf"Error: (describing in-flight records|a force release) needs a quafka broker: the broker "
                        rf"at {re.escape(bootstrap)} does not serve quafka's API extension \(Apache Kafka has no "
                        rf"admin API for in-flight records\)\n", err), err
