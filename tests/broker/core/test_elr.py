"""core/elr.py: the config rules of eligible leader replicas (KIP-966), as Kafka's
ConfigurationControlManager has them (validateAlterConfig, maybeGenerateElrSafetyRecords)."""

from __future__ import annotations

import pytest

from quafka.broker.core import elr


@pytest.mark.parametrize(("resource", "altered", "level", "expected"), [
    ("", {"min.insync.replicas": None}, 1, elr.CLUSTER_MIN_ISR_REMOVAL_ERROR),
    ("", {"min.insync.replicas": "2"}, 1, None),  # an update is allowed (Kafka clears the ELRs)
    ("", {"min.insync.replicas": None}, 0, None),  # ELR off: nothing to protect
    ("1", {"min.insync.replicas": "2"}, 1, elr.BROKER_MIN_ISR_ALTER_ERROR),
    ("1", {"min.insync.replicas": None}, 1, elr.BROKER_MIN_ISR_ALTER_ERROR),  # a DELETE too
    ("1", {"min.insync.replicas": "2"}, 0, None),
    ("", {"log.retention.ms": None}, 1, None),
])
def test_alter_error_follows_kafkas_min_isr_transitions(resource, altered, level, expected):
    assert elr.alter_error(resource, altered, level) == expected


def test_safety_records_add_the_cluster_level_value_and_remove_per_broker_ones():
    configs = {"": {"log.retention.ms": "1000"}, "1": {"min.insync.replicas": "2", "log.retention.bytes": "5"}}
    assert elr.safety_records(configs, 3) == [
        {"type": "broker_configs", "resource": "", "configs": {"log.retention.ms": "1000", "min.insync.replicas": "3"}},
        {"type": "broker_configs", "resource": "1", "configs": {"log.retention.bytes": "5"}},
    ]
    assert elr.safety_records({"": {"min.insync.replicas": "2"}}, 3) == []  # already safe: nothing


def test_bootstrap_records_write_the_config_before_the_feature_at_epoch_0():
    assert elr.bootstrap_records(2) == [
        {"type": "broker_configs", "resource": "", "configs": {"min.insync.replicas": "2"}},
        {"type": "feature_level", "feature": "eligible.leader.replicas.version", "level": 1, "epoch": 0},
    ]
