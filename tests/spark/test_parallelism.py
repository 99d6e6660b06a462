"""spark.default.parallelism from a driver JVM's launch configuration (quafka.spark.parallelism):
Spark's rule for every kind of master, spark-submit's option forms, and the properties files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from quafka.spark.parallelism import (
    default_parallelism,
    is_local_master,
    parse_properties,
    runner_default_parallelism,
    submit_conf,
)

JAVA = ["/usr/bin/java", "-cp", "/spark/conf:/spark/jars/*", "-Xmx1g", "org.apache.spark.deploy.SparkSubmit"]


@pytest.mark.parametrize("master, expected", [
    ("local", 1), ("local[1]", 1), ("local[4]", 4), ("local[*]", 16), ("local[2, 3]", 2), ("local[*,4]", 16),
    ("local-cluster[2, 3, 1024]", 6), ("local-cluster[1,1,512]", 2),
    ("yarn", None), ("spark://host:7077", None), ("k8s://https://api:6443", None),
])
def test_masters(master, expected):
    assert default_parallelism({"spark.master": master}, cpu_count=16) == expected


@pytest.mark.parametrize("master, local", [
    ("local", True), ("local[2]", True), ("local[2, 2]", True), ("local[*]", True),
    ("local-cluster[2, 1, 1024]", False), ("spark://127.0.0.1:7077", False), ("yarn", False),
    ("k8s://https://api:6443", False), (None, False), ("", False),
])
def test_local_masters_keep_the_executors_in_the_driver_jvm(master, local):
    """The streaming source's executorFetch=auto: false only where the executors share the driver's JVM."""
    assert is_local_master(master) is local


def test_explicit_setting_wins_and_cluster_sizes():
    assert default_parallelism({"spark.master": "local[4]", "spark.default.parallelism": "7"}, 16) == 7
    assert default_parallelism({"spark.master": "yarn", "spark.executor.instances": "3",
                                "spark.executor.cores": "4"}, 16) == 12
    assert default_parallelism({"spark.master": "spark://h:7077", "spark.cores.max": "1"}, 16) == 2
    assert default_parallelism({}, 8) == 8  # no master: PySpark's local[*]
    assert default_parallelism({"spark.master": "yarn", "spark.default.parallelism": "x"}, 8) is None


def test_pyspark_launch_command_line():
    """PySpark's launch_gateway: every builder setting as --conf, then pyspark-shell."""
    argv = JAVA + ["--conf", "spark.master=local[2, 2]", "--conf", "spark.app.name=t",
                   "--conf", "spark.default.parallelism=3", "pyspark-shell"]
    conf = submit_conf(argv, {"spark.default.parallelism": "9", "spark.eventLog.enabled": "true"})
    assert conf["spark.default.parallelism"] == "3"  # the command line overrides spark-defaults.conf
    assert conf["spark.eventLog.enabled"] == "true"
    assert default_parallelism(conf, 16) == 3


def test_spark_submit_flags_and_forms():
    argv = JAVA + ["--name", "job", "--master=yarn", "--verbose", "--num-executors", "5",
                   "--executor-cores", "2", "-c", "spark.x=1", "--conf=spark.y=a=b", "--jars", "a.jar",
                   "app.py", "--conf", "spark.default.parallelism=99"]  # after app.py: the app's own arguments
    conf = submit_conf(argv)
    assert conf["spark.master"] == "yarn" and conf["spark.x"] == "1" and conf["spark.y"] == "a=b"
    assert "spark.default.parallelism" not in conf
    assert default_parallelism(conf, 16) == 10


def test_properties_file_replaces_defaults():
    files = {"/etc/my.conf": "# comment\n! other comment\nspark.master   local[5]\nspark.k=v\nspark.j: w\n"}
    conf = submit_conf(JAVA + ["--properties-file", "/etc/my.conf", "pyspark-shell"],
                       {"spark.master": "local[1]", "spark.only.in.defaults": "1"}, files.get)
    assert conf == {"spark.master": "local[5]", "spark.k": "v", "spark.j": "w"}
    assert parse_properties("a b c\n\nflag\n") == {"a": "b c", "flag": ""}


def test_not_a_spark_jvm():
    assert submit_conf(["/usr/bin/python", "-m", "pytest"]) is None
    # a child of this pytest process: its parent is not a Spark driver JVM
    out = subprocess.run([sys.executable, "-c", "from quafka.spark.parallelism import runner_default_parallelism;"
                          "print(runner_default_parallelism())"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None"
