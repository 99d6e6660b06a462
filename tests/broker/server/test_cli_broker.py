"""`quafka broker`: config errors stop start-up with a clear message; ignored keys warn; SIGTERM
shuts down cleanly (exit 0)."""

from __future__ import annotations

import subprocess
import sys

from support import free_port


def run_broker(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quafka", "broker", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_unknown_key_stops_startup_naming_the_key(tmp_path):
    result = run_broker("--override", f"log.dirs={tmp_path}", "--override", "no.such.key=1")
    assert result.returncode == 1
    assert "no.such.key" in result.stderr


def test_out_of_range_value_names_key_value_and_range(tmp_path):
    result = run_broker("--override", f"log.dirs={tmp_path}", "--override", "log.segment.bytes=1000")
    assert result.returncode == 1
    assert "log.segment.bytes" in result.stderr and "1000" in result.stderr and "1048576" in result.stderr


def test_config_file_is_read_and_bad_file_reported(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=0\n")
    result = run_broker("--config", str(props), "--override", f"log.dirs={tmp_path / 'd'}")
    assert result.returncode == 1 and "num.partitions" in result.stderr
    missing = run_broker("--config", str(tmp_path / "nope.properties"))
    assert missing.returncode == 1 and "nope.properties" in missing.stderr


def test_ignored_keys_warn_and_sigterm_exits_cleanly(tmp_path, broker_process):
    broker = broker_process(str(tmp_path / "data"), overrides={
        "process.roles": "broker,controller", "num.network.threads": "3"})
    assert broker.stop() == 0
    log = broker.read_log()
    assert "process.roles" in log and "num.network.threads" in log
    assert "stopped" in log


def test_broker_help_lists_options():
    result = subprocess.run([sys.executable, "-m", "quafka", "broker", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "--config" in result.stdout and "--override" in result.stdout


def test_port_in_use_is_reported(tmp_path, broker_process):
    first = broker_process(str(tmp_path / "a"))
    try:
        result = run_broker("--override", f"log.dirs={tmp_path / 'b'}",
                            "--override", f"listeners=PLAINTEXT://127.0.0.1:{first.port}")
        assert result.returncode == 1
        assert str(first.port) in result.stderr or "address" in result.stderr.lower()
    finally:
        first.stop()
    assert free_port() > 0
