"""The layer rules of architecture.md hold, and each check fails when a forbidden import is added.

The import-linter contracts of pyproject.toml (a layers contract as an allow-list, the client's
independence from the broker, spark's use of the client only) and tools/core_lint.py (the sans-I/O
modules import no clock, randomness, threads, os, sockets, and use no hash()/open()) are run on a
copy of the source tree into which one forbidden import is added per case: the check must name it.
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


IMPORT_CASES = [  # (module changed, forbidden import, the contract that must break)
    ("protocol/errors.py", "import quafka.broker.core.record_state", "layers"),
    ("broker/core/metadata.py", "import quafka.client.records", "layers"),
    ("broker/core/metadata.py", "import quafka.broker._config_types", "layers"),
    ("broker/storage/base.py", "import quafka.broker.core.metadata", "layers"),
    ("broker/_config_types.py", "import quafka.broker.config", "layers"),
    ("client/records.py", "import quafka.broker.core.metadata", "the client and the broker are independent"),
    ("broker/server/clock.py", "import quafka.client.records", "the client and the broker are independent"),
    ("spark/options.py", "import quafka.broker.core.metadata", "spark and the worker framework use the client"),
    ("framework/messages.py", "import quafka.broker.core.metadata", "spark and the worker framework use the client"),
    ("client/records.py", "import quafka.spark.options", "layers"),
    ("client/records.py", "import quafka.framework.messages", "layers"),
    ("framework/messages.py", "import quafka.cli.main", "layers"),
]


@pytest.mark.parametrize(("module", "line", "contract"), IMPORT_CASES,
                         ids=[f"{m}:{line.split()[-1]}" for m, line, _ in IMPORT_CASES])
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    root = copy_tree(tmp_path)
    add_line(root / "src" / "quafka" / module, line)
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    run = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 1, run.stdout
    broken = [chunk for chunk in run.stdout.split("\n\n") if "BROKEN" in chunk.replace("\n", " ")]
    assert any(contract in " ".join(chunk.split()) for chunk in broken), run.stdout
    assert line.split()[-1] in run.stdout  # the report names the import


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
