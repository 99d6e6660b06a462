"""The core lint of architecture.md: the sans-I/O code stays pure.

Checked: protocol/, broker/core/, and the client's sans-I/O modules (CLIENT_PURE_MODULES: the
share-consumer decisions, acknowledgement ranges, records, share-state decoding). They never import
asyncio, time, random, uuid, threading, os, datetime, secrets, socket or subprocess (time comes in
as now_ms, ids from an injected id source, durations as integers of ms), never use the built-in
hash() (salted per process for str and bytes) or open() in any form: called, passed as a value,
through `builtins` or `io`, or as an explicit `__hash__` call. A client sans-I/O module imports
other client modules only if they are sans-I/O too (so no I/O comes in through them).
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
CLIENT_PURE_MODULES = ["_ranges.py", "_share_requests.py", "_share_request_manager.py", "_share_acks.py",
                       "_share_fetch.py", "_share_membership.py", "_share_session.py", "records.py",
                       "coordinator_records.py", "_share_consumer_config.py", "_config.py", "_metadata.py",
                       "errors.py", "_security.py", "_scram_client.py"]
FORBIDDEN_MODULES = {"asyncio", "time", "random", "uuid", "threading", "os", "datetime", "secrets", "socket",
                     "subprocess"}
ALLOWED_NAMES = {"uuid": {"UUID"}}  # value types only
FORBIDDEN_BUILTINS = {"hash", "open"}
FORBIDDEN_ATTRIBUTES = {("builtins", "hash"), ("builtins", "open"), ("io", "open")}


def pure_files() -> list[pathlib.Path]:
    files = [path for package in PURE_PACKAGES for path in sorted(package.rglob("*.py"))]
    return files + [ROOT / "client" / name for name in CLIENT_PURE_MODULES]


def violations(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"{path}:{node.lineno}: imports {alias.name}")
        elif (isinstance(node, ast.ImportFrom) and node.level == 1 and path.parent == ROOT / "client"
              and path.name in CLIENT_PURE_MODULES and f"{node.module}.py" not in CLIENT_PURE_MODULES):
            found.append(f"{path}:{node.lineno}: imports .{node.module}, which is not one of the client's "
                         "sans-I/O modules")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            allowed = ALLOWED_NAMES.get(node.module, set())
            if node.module.split(".")[0] in FORBIDDEN_MODULES and not {a.name for a in node.names} <= allowed:
                found.append(f"{path}:{node.lineno}: imports from {node.module}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_BUILTINS and isinstance(node.ctx, ast.Load):
            found.append(f"{path}:{node.lineno}: uses the built-in {node.id}()")
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if node.attr == "__hash__":
                found.append(f"{path}:{node.lineno}: uses __hash__ (the built-in hash)")
            elif isinstance(node.value, ast.Name) and (node.value.id, node.attr) in FORBIDDEN_ATTRIBUTES:
                found.append(f"{path}:{node.lineno}: uses {node.value.id}.{node.attr}()")
    return found


def main(files: list[pathlib.Path] | None = None) -> int:
    files = pure_files() if files is None else files
    problems = []
    for path in files:
        problems.extend(violations(path))
    for line in problems:
        print(line)
    if problems:
        print(f"core lint: {len(problems)} violation(s): protocol/, broker/core/ and the client's sans-I/O modules "
              "must stay pure", file=sys.stderr)
        return 1
    print(f"core lint: {len(files)} files pure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
