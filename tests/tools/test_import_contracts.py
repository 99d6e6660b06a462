"""The layer rules of architecture.md hold, and each check fails when a forbidden import is added.

The import-linter contracts of pyproject.toml (two layers contracts as allow-lists: the packages, with
the client and the broker as independent siblings and `_exposition` beside protocol at the bottom, and
the broker's own layers; spark's use of the client only) and tools/core_lint.py (the sans-I/O
modules import no clock, randomness, threads, os, sockets, and use no hash()/open()) are run on a
copy of the source tree into which one forbidden import is added per case: the check must name it.
A layer renamed away breaks the layers contract too (no layer is optional).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_tree_keeps_every_contract():
    run = subprocess.run([str(LINT_IMPORTS)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout
    lint = subprocess.run([sys.executable, "tools/core_lint.py"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def copy_tree(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "src" / "quafka", tmp_path / "src" / "quafka",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(REPO / "tools", tmp_path / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def add_line(path: Path, line: str) -> None:
    path.write_text(path.read_text() + "\n" + line + "  # added by test_import_contracts\n")


def run_lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, env=env,
                          timeout=120)


LAYERS = "layers: cli >"  # the top-level layers contract
BROKER_LAYERS = "broker layers:"
SIBLINGS = "client | broker (independent"
CLIENT_ONLY = "the dashboard use the client, never the broker"  # spark, the framework and the dashboard  # the top-level contract, on the client and the broker

IMPORT_CASES = [  # (module changed, forbidden import, the contract that must break)
    ("protocol/errors.py", "import quafka.broker.core.record_state", LAYERS),
    ("broker/core/metadata.py", "import quafka.client.records", SIBLINGS),
    ("broker/core/metadata.py", "import quafka.broker._config_types", BROKER_LAYERS),
    ("broker/storage/base.py", "import quafka.broker.core.metadata", BROKER_LAYERS),
    ("broker/_config_types.py", "import quafka.broker.config", BROKER_LAYERS),
    ("client/records.py", "import quafka.broker.core.metadata", SIBLINGS),
    ("client/records.py", "import quafka.broker.config", SIBLINGS),
    ("client/records.py", "import quafka.broker.server.clock", SIBLINGS),
    ("broker/server/clock.py", "import quafka.client.records", SIBLINGS),
    ("spark/options.py", "import quafka.broker.core.metadata", CLIENT_ONLY),
    ("framework/messages.py", "import quafka.broker.core.metadata", CLIENT_ONLY),
    ("dashboard/settings.py", "import quafka.broker.core.metadata", CLIENT_ONLY),
    ("dashboard/settings.py", "import quafka.cli.main", LAYERS),
    ("dashboard/settings.py", "import quafka.framework.metrics", LAYERS),
    ("client/records.py", "import quafka.dashboard.settings", LAYERS),
    ("client/records.py", "import quafka.spark.options", LAYERS),
    ("client/records.py", "import quafka.framework.messages", LAYERS),
    ("framework/messages.py", "import quafka.cli.main", LAYERS),
    ("framework/messages.py", "import quafka.spark.options", LAYERS),
    ("_exposition.py", "import quafka.broker.server.metrics", LAYERS),
    ("_exposition.py", "import quafka.framework.metrics", LAYERS),
    ("_exposition.py", "import quafka.protocol.errors", LAYERS),
    ("protocol/errors.py", "import quafka._exposition", LAYERS),
]


@pytest.mark.parametrize(("module", "line", "contract"), IMPORT_CASES,
                         ids=[f"{m}:{line.split()[-1]}" for m, line, _ in IMPORT_CASES])
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    root = copy_tree(tmp_path)
    add_line(root / "src" / "quafka" / module, line)
    run = run_lint_imports(root)
    assert run.returncode == 1, run.stdout
    broken = [chunk for chunk in run.stdout.split("\n\n") if "BROKEN" in chunk.replace("\n", " ")]
    assert any(contract in " ".join(chunk.split()) for chunk in broken), run.stdout
    assert line.split()[-1] in run.stdout  # the report names the import


MISSING_LAYERS = [  # (package or module renamed away, the layer the contract must report missing)
    ("framework", "quafka.framework"),
    ("dashboard", "quafka.dashboard"),
    ("_exposition.py", "quafka._exposition"),
    ("broker/_group_config.py", "quafka.broker._group_config"),
]


@pytest.mark.parametrize(("path", "layer"), MISSING_LAYERS, ids=[p for p, _ in MISSING_LAYERS])
def test_a_layer_that_goes_missing_breaks_the_layers_contract(tmp_path, path, layer):
    """Every layer is required: a rename leaves no layer silently unchecked."""
    root = copy_tree(tmp_path)
    old = root / "src" / "quafka" / path
    old.rename(old.with_name("renamed_" + old.name))
    run = run_lint_imports(root)
    assert run.returncode == 1, run.stdout
    report = " ".join((run.stdout + run.stderr).split())
    assert "Missing layer" in report and f"module {layer} does not exist" in report, report


CORE_CASES = [
    ("broker/core/share_partition.py", "import os"),
    ("protocol/varint.py", "from datetime import timedelta"),
    ("broker/core/metadata.py", "import secrets"),
    ("client/_share_acks.py", "import time"),
    ("client/_share_session.py", "_h = hash"),
    ("protocol/framing.py", "_f = open('x')"),
    ("broker/core/dead_letters.py", "import builtins; _h = builtins.hash('x')"),
    ("client/records.py", "_x = 'k'.__hash__()"),
    ("client/_share_request_manager.py", "from ._cluster import Cluster"),  # I/O through a client module
]


@pytest.mark.parametrize(("module", "line"), CORE_CASES, ids=[f"{m}:{l}" for m, l in CORE_CASES])
def test_the_core_lint_names_an_impure_line(tmp_path, module, line):
    root = copy_tree(tmp_path)
    add_line(root / "src" / "quafka" / module, line)
    lint = subprocess.run([sys.executable, "tools/core_lint.py"], cwd=root, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 1, lint.stdout
    assert module in lint.stdout and "violation" in lint.stderr
