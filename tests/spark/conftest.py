"""The Spark tests' fixtures (test modules mark themselves `pytestmark = pytest.mark.spark`): one local[2, 2] SparkSession per test process (task retries allowed),
UI and progress bar off, loopback only; and a broker per module."""

from __future__ import annotations

import os
import sys

import pytest

from quafka import EmbeddedBroker


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers need this venv (quafka, pyspark_quafka)
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2, 2]").appName("quafka-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               # 3, not the 2 of local[2]: the stream test checks numPartitions defaults to it
               .config("spark.default.parallelism", "3")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def bootstrap():
    """One broker for the module: every test uses its own topics and groups."""
    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers
