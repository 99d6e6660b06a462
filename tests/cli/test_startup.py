"""The `quafka` command's start-up (quafka.protocol.kio_import.import_kio_without_test_strategies): where
hypothesis is installed (this test environment), kio would import it, and pytest through
trio.testing, to register test strategies for its protocol types, ~0.5 s of every broker start and
tool command. The command imports kio without them, and hypothesis stays importable afterwards."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from quafka.cli.main import main
try:
    main(["topics", "--help"])
except SystemExit:
    pass
loaded = sorted(name for name in ("kio.serial", "hypothesis", "pytest") if name in sys.modules)
import hypothesis.strategies
print(json.dumps({"loaded": loaded, "hypothesis_importable": hypothesis.strategies.integers is not None}))
"""


def test_the_command_imports_kio_without_hypothesis_or_pytest():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer == {"loaded": ["kio.serial"], "hypothesis_importable": True}, answer
