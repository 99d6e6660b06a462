"""`quafka features`, as kafka-features.sh (Kafka 4.4's FeatureCommand: describe, upgrade,
downgrade, their output lines and the failure count), and the Admin calls behind it."""

from __future__ import annotations

import pytest

from quafka import EmbeddedBroker
from quafka.client import Admin

from cli.helpers import cli


@pytest.fixture
def bs():
    with EmbeddedBroker() as broker:  # its own: these tests change the cluster's feature levels
        yield broker.bootstrap_servers


def test_describe_upgrade_and_downgrade_print_kafkas_lines(capsys, bs):
    code, out, _ = cli(capsys, "features", "--bootstrap-server", bs, "describe")
    assert (code, out) == (0, "Feature: eligible.leader.replicas.version\tSupportedMinVersion: 0\t"
                              "SupportedMaxVersion: 1\tFinalizedVersionLevel: 1\tEpoch: 0\n"
                              "Feature: share.version\tSupportedMinVersion: 1\tSupportedMaxVersion: 2\t"
                              "FinalizedVersionLevel: 2\tEpoch: 0\n"
                              "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
                              "FinalizedVersionLevel: 2\tEpoch: 0\n")
    code, out, err = cli(capsys, "features", "--bootstrap-server", bs, "upgrade", "--feature", "share.version=1")
    assert code == 1 and out.startswith("Could not upgrade share.version to 1. ") and "downgrade" in out
    assert err == "Error: 1 out of 1 operation(s) failed.\n"
    assert cli(capsys, "features", "--bootstrap-server", bs, "downgrade", "--feature", "share.version=1",
               "--dry-run")[:2] == (0, "share.version can be downgraded to 1.\n")
    assert cli(capsys, "features", "--bootstrap-server", bs, "downgrade", "--feature",
               "share.version=1")[:2] == (0, "share.version was downgraded to 1.\n")
    assert "FinalizedVersionLevel: 1\tEpoch: 1" in cli(capsys, "features", "--bootstrap-server", bs, "describe")[1]
    assert cli(capsys, "features", "--bootstrap-server", bs, "upgrade", "--feature",
               "share.version=2")[:2] == (0, "share.version was upgraded to 2.\n")


@pytest.mark.parametrize(("args", "message"), [
    (["upgrade"], "You must specify at least one feature to upgrade"),
    (["upgrade", "--feature", "share.version"], "expected feature=level"),
    (["upgrade", "--feature", "share.version=2", "--feature", "share.version=1"], "specified more than once"),
    ([], "a command is required"),
])
def test_bad_commands_fail_with_one_line(capsys, args, message):
    code, out, err = cli(capsys, "features", "--bootstrap-server", "127.0.0.1:1", *args)
    assert code == 1 and message in err and err.count("\n") == 1


def test_admin_describe_and_update_features(bs):
    with Admin({"bootstrap.servers": bs}) as admin:
        assert admin.describe_features().finalized == {"eligible.leader.replicas.version": (1, 1),
                                                       "share.version": (2, 2), "transaction.version": (2, 2)}
        refused = admin.update_features({"share.version": 0}, "safe_downgrade")
        assert "only supports versions 1-2" in refused["share.version"].message
        assert admin.update_features({"share.version": 1}, "unsafe_downgrade") == {"share.version": None}
        meta = admin.describe_features()
        assert (meta.supported, meta.finalized, meta.finalized_epoch) == (
            {"eligible.leader.replicas.version": (0, 1), "share.version": (1, 2), "transaction.version": (0, 2)},
            {"eligible.leader.replicas.version": (1, 1), "share.version": (1, 1), "transaction.version": (2, 2)}, 1)
