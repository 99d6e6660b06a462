"""Restart time against data size: from `quafka broker` process start to its port accepting
connections, after a clean shutdown and after a SIGKILL (issue 14).

Scenarios (each builds its own data directory under --work-dir, then deletes it):

- ``1gb``  / ``5gb``: one topic of 8 partitions holding 1 GB / 5 GB, Kafka's default segment.bytes
  (1 GiB: every partition's data is in its active segment, the costliest case for recovery),
  16 KiB batches of 16 records of 1 KiB from 16 idempotent producers per partition.
- ``5gb-256m``: the same 5 GB in segments of 256 MiB (two sealed segments and an active one of
  128 MiB per partition): what a SIGKILL restart costs when most data is in sealed segments.
- ``100k``: 100,000 segments of small topics: 200 topics x 10 partitions x 50 segments of two
  4 KiB batches (~800 MB), so every segment's files are opened.

The data is written through the broker's own storage path in-process (BrokerState: topics in
the metadata journal, FileLog.append and the producer-state table as the produce path does;
segments rolled at --segment-bytes) and closed cleanly: the directory a broker leaves. Then:

- clean restart: start the broker, wait until its port accepts, SIGTERM it (a clean shutdown),
  repeat; the first start follows the builder's clean close;
- SIGKILL restart: before each start the directory is put in the state a SIGKILL leaves at the
  worst moment — everything since the last segment roll unsnapshotted: the clean-shutdown
  producer snapshots (above the last segment's base offset) and the active segments' index
  files (written only at roll and close) are removed — then the broker is started, timed, and
  killed with SIGKILL.

Timed: from just before the process is spawned to the first accepted TCP connection (Python start
and imports included; the "empty" row is that floor). Best of --runs. The page cache is warm (the
data was just written or read) unless --cold, which evicts this directory's files from the page
cache (posix_fadvise DONTNEED, after a sync of them) before every start.

--src DIR runs the broker from another source tree (e.g. an unpacked older commit:
``git archive <commit> src | tar -x -C /tmp/before``), to compare before/after a change on the
same data.

    .venv/bin/python benchmarks/restart.py --scenario 1gb,5gb,100k --runs 3
    .venv/bin/python benchmarks/restart.py --scenario 5gb --runs 3 --src /tmp/before/src --src src
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCENARIOS = {
    # name: topics, partitions per topic, bytes per partition, segment.bytes, batch bytes, records per batch
    "empty": dict(topics=0, partitions=0, partition_bytes=0, segment_bytes=1 << 30, batch_bytes=16384, records=16),
    "smoke": dict(topics=2, partitions=2, partition_bytes=16 << 20, segment_bytes=4 << 20, batch_bytes=16384,
                  records=16),
    "1gb": dict(topics=1, partitions=8, partition_bytes=(1 << 30) // 8, segment_bytes=1 << 30, batch_bytes=16384,
                records=16),
    "5gb": dict(topics=1, partitions=8, partition_bytes=5 * (1 << 30) // 8, segment_bytes=1 << 30,
                batch_bytes=16384, records=16),
    "5gb-256m": dict(topics=1, partitions=8, partition_bytes=5 * (1 << 30) // 8, segment_bytes=256 << 20,
                     batch_bytes=16384, records=16),
    "100k": dict(topics=200, partitions=10, partition_bytes=50 * 2 * 4096, segment_bytes=2 * 4096 + 200,
                 batch_bytes=4096, records=4),
}
PRODUCERS_PER_PARTITION = 16


# ----------------------------------------------------------------------------- building the data


def build(data_dir: str, spec: dict) -> dict:
    """Write the scenario's data through BrokerState / FileLog (this source tree), close cleanly."""
    sys.path.insert(0, os.path.join(REPO, "src"))
    import crc32c

    from quafka.broker import config as cfg
    from quafka.broker.server.clock import wall_clock_ms
    from quafka.broker.server.state import BrokerState
    from quafka.protocol.record_batch import build_batch, read_header

    config = cfg.BrokerConfig.from_props({"log.dirs": data_dir, "listeners": "PLAINTEXT://127.0.0.1:0"})
    state = BrokerState(config, memory=False, clock_ms=wall_clock_ms)
    state.load()
    records = spec["records"]
    value_bytes = spec["batch_bytes"] // records - 20  # ~20 bytes of record framing and key
    template = bytearray(build_batch([(b"k%03d" % i, bytes([65 + i % 26]) * value_bytes) for i in range(records)],
                                     producer_id=0, producer_epoch=0, base_sequence=0,
                                     base_timestamp=wall_clock_ms()))
    batch_bytes = len(template)
    header = read_header(template, 0)
    pid_base = state.allocate_producer_id()
    pids = [pid_base] + [state.allocate_producer_id() for _ in range(PRODUCERS_PER_PARTITION - 1)]
    batches = segments = 0
    started = time.monotonic()
    for t in range(spec["topics"]):
        topic = state.create_topic(f"bench-{t:04d}", spec["partitions"], 1, {})
        for part in topic.partitions:
            plog = part.log
            plog.update_config(dataclasses.replace(plog.config, segment_bytes=spec["segment_bytes"]))
            seqs = [0] * len(pids)
            count = max(1, spec["partition_bytes"] // batch_bytes)
            for i in range(count):
                k = i % len(pids)
                pid, seq = pids[k], seqs[k]
                buf = bytearray(template)
                struct.pack_into(">qhi", buf, 43, pid, 0, seq)  # producerId, producerEpoch, baseSequence
                struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
                now_ms = wall_clock_ms()
                info = plog.append(buf, [(0, header)], now_ms)
                part.producers.record(pid, 0, seq, seq + records - 1, info.first_offset, info.last_offset)
                seqs[k] = seq + records
                batches += 1
                if len(plog._segments) > 1:  # sealed segments keep their descriptor open: free them
                    for seg in plog._segments[:-1]:
                        seg.close_fd()
            segments += len(plog.segment_base_offsets)
    state.close()
    return {"batches": batches, "segments": segments, "build_s": round(time.monotonic() - started, 1),
            "bytes": dir_bytes(data_dir)}


def dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


# ----------------------------------------------------------------------------- crash state, cache


def make_crashed(data_dir: str) -> None:
    """The state SIGKILL leaves at the worst moment: no producer snapshot above the last segment's
    base (a clean shutdown's or a start-up's), no index files for the active segment."""
    for name in os.listdir(data_dir):
        path = os.path.join(data_dir, name)
        if not os.path.isdir(path) or name.startswith("__"):
            continue
        files = os.listdir(path)
        bases = [int(n[:-4]) for n in files if n.endswith(".log") and n[:-4].isdigit()]
        if not bases:
            continue
        last = max(bases)
        for n in files:
            stem, _, suffix = n.partition(".")
            if not stem.isdigit():
                continue
            if (suffix == "snapshot" and int(stem) > last) or (suffix in ("index", "timeindex") and int(stem) == last):
                os.unlink(os.path.join(path, n))


def evict_from_page_cache(data_dir: str) -> None:
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            path = os.path.join(root, name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# ----------------------------------------------------------------------------- timing a start


def last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port: int) -> bool:
    """A listener accepted a connection on the port. Polling a port in the ephemeral range can
    connect a socket to itself (TCP simultaneous open, when the kernel picks the same port as
    the source): that is no listener."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            return s.getsockname() != s.getpeername()
    except OSError:
        return False


def start_broker(data_dir: str, src: str, log_path: str, deadline_s: float = 600.0):
    """(process, seconds from spawn to an accepted connection). The connection must have been
    our broker's (on a shared machine another process can take a free port first): its log must
    then say it listens on that port, else the start is tried again."""
    for _attempt in range(5):
        log_start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        proc, seconds, port = _start_broker(data_dir, src, log_path, deadline_s)
        marker = f"listening on 127.0.0.1:{port}"
        deadline = time.monotonic() + deadline_s
        while proc.poll() is None and time.monotonic() < deadline and marker not in _read(log_path, log_start):
            time.sleep(0.05)
        if proc.poll() is None and marker in _read(log_path, log_start):
            return proc, seconds
        if proc.poll() is None:
            proc.kill()
        proc.wait(60)
        print(f"  (port {port} was not our broker's; starting again)", flush=True)
    raise RuntimeError(f"broker did not start; see {log_path}")


def _read(path: str, offset: int) -> str:
    with open(path, errors="replace") as f:
        f.seek(offset)
        return f.read()


def _start_broker(data_dir: str, src: str, log_path: str, deadline_s: float):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    args = [sys.executable, "-m", "quafka", "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={data_dir}"]
    log = open(log_path, "ab")
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    while not accepts(port):
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}; see {log_path}")
        if time.perf_counter() - started > deadline_s:
            proc.kill()
            raise RuntimeError(f"broker did not listen within {deadline_s} s; see {log_path}")
        time.sleep(0.002)
    return proc, time.perf_counter() - started, port


def measure(data_dir: str, src: str, kind: str, runs: int, cold: bool, log_path: str) -> dict:
    starts, stops = [], []
    for _ in range(runs):
        if kind == "sigkill":
            make_crashed(data_dir)
        if cold:
            evict_from_page_cache(data_dir)
        proc, seconds = start_broker(data_dir, src, log_path)
        starts.append(seconds)
        if kind == "clean":
            t = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            if proc.wait(600) != 0:
                raise RuntimeError(f"broker exited with {proc.returncode} on SIGTERM; see {log_path}")
            stops.append(time.perf_counter() - t)
        else:
            proc.kill()
            proc.wait(60)
    out = {"best_s": min(starts), "runs_s": [round(s, 3) for s in starts]}
    if stops:
        out["stop_best_s"] = min(stops)
    return out


# ----------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="empty,1gb,5gb,100k", help="comma-separated: " + ", ".join(SCENARIOS))
    ap.add_argument("--runs", type=int, default=3, help="starts per measurement (best is reported)")
    ap.add_argument("--src", action="append", default=None,
                    help="source tree(s) to run the broker from (repeatable; default: this repository's src)")
    ap.add_argument("--kinds", default="clean,sigkill")
    ap.add_argument("--cold", action="store_true", help="evict the data from the page cache before each start")
    ap.add_argument("--work-dir", default=None, help="where the data directories go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--reuse", action="store_true", help="use a kept data directory instead of building it again")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("_build", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._build == "build":  # the builder, in a process of its own
        print(json.dumps(build(args.data_dir, json.loads(args.spec))))
        return 0
    srcs = args.src or [os.path.join(REPO, "src")]
    work = args.work_dir or tempfile.mkdtemp(prefix="quafka-restart-")
    os.makedirs(work, exist_ok=True)
    results = []
    for name in args.scenario.split(","):
        spec = SCENARIOS[name]
        data_dir = os.path.join(work, f"data-{name}")
        built_path = data_dir + ".json"
        if args.reuse and os.path.exists(built_path):
            with open(built_path) as f:
                built = json.load(f)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
            print(f"[{name}] building ...", flush=True)
            built = json.loads(subprocess.run(
                [sys.executable, os.path.abspath(__file__), "build", "--data-dir", data_dir,
                 "--spec", json.dumps(spec)],
                check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
            with open(built_path, "w") as f:
                json.dump(built, f)
        print(f"[{name}] {built['bytes'] / 1e9:.2f} GB, {built['segments']:,} segments, {built['batches']:,} "
              f"batches, built in {built['build_s']} s", flush=True)
        try:
            for src in srcs:
                log_path = os.path.join(work, f"broker-{name}.log")
                for kind in args.kinds.split(","):
                    try:
                        row = measure(data_dir, src, kind, args.runs, args.cold, log_path)
                    except RuntimeError as exc:  # e.g. a broker that cannot start on this data
                        row = {"error": last_line(log_path) or str(exc)}
                        print(f"[{name}] {kind:7s} {src}: FAILED: {row['error']}", flush=True)
                    else:
                        stop = f", clean stop {row['stop_best_s']:.2f} s" if "stop_best_s" in row else ""
                        print(f"[{name}] {kind:7s} {src}: best {row['best_s']:.2f} s of {row['runs_s']}{stop}",
                              flush=True)
                    row.update(scenario=name, src=src, kind=kind, cold=args.cold, **built)
                    results.append(row)
                try:  # leave the directory cleanly shut down for the next source tree
                    proc, _ = start_broker(data_dir, src, log_path)
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(600)
                except RuntimeError:
                    pass
        finally:
            if not args.keep:
                shutil.rmtree(data_dir, ignore_errors=True)
                if os.path.exists(built_path):
                    os.unlink(built_path)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if not args.keep and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| scenario | data | segments | source | clean restart | SIGKILL restart |")
    print("|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["scenario"] for r in results):
        for src in srcs:
            rows = {r["kind"]: r for r in results if r["scenario"] == name and r["src"] == src}
            any_row = next(iter(rows.values()))
            cells = [("fails" if "error" in rows[k] else f"{rows[k]['best_s']:.2f} s") if k in rows else "-"
                     for k in ("clean", "sigkill")]
            print(f"| {name} | {any_row['bytes'] / 1e9:.2f} GB | {any_row['segments']:,} | {src} "
                  f"| {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
