"""The core lint of architecture.md: protocol/ and broker/core/ stay pure.

They never import asyncio, time, random, uuid or threading (time comes in as now_ms, ids from an
injected id source), and never call the built-in hash() (salted per process for str and bytes).
The one exception is `from uuid import UUID`: the value type of topic ids, which decoders build
from bytes; the generators (uuid1, uuid4, ...) stay out.
Exit status 1 with one line per violation.
"""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "src" / "quafka"
PURE_PACKAGES = [ROOT / "protocol", ROOT / "broker" / "core"]
FORBIDDEN_MODULES = {"asyncio", "time", "random", "uuid", "threading"}
ALLOWED_NAMES = {"uuid": {"UUID"}}  # value types only


def violations(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"{path}:{node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            allowed = ALLOWED_NAMES.get(node.module, set())
            if node.module.split(".")[0] in FORBIDDEN_MODULES and not {a.name for a in node.names} <= allowed:
                found.append(f"{path}:{node.lineno}: imports from {node.module}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hash":
            found.append(f"{path}:{node.lineno}: calls the built-in hash()")
    return found


def main() -> int:
    problems = []
    for package in PURE_PACKAGES:
        for path in sorted(package.rglob("*.py")):
            problems.extend(violations(path))
    for line in problems:
        print(line)
    if problems:
        print(f"core lint: {len(problems)} violation(s): protocol/ and broker/core/ must stay pure", file=sys.stderr)
        return 1
    print(f"core lint: {sum(1 for p in PURE_PACKAGES for _ in p.rglob('*.py'))} files pure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
