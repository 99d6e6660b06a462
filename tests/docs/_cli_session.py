"""A warm interpreter for the ``quafka ...`` lines of a document's shell blocks
(tests/docs/test_snippets.py): starting ``quafka`` as a new process costs ~0.7 s of imports, and
docs/cli.md alone runs it ~60 times.

It imports the CLI and every subcommand once, then reads one JSON request a line on stdin,
``{"argv": [...], "stdout": path, "stderr": path}``, and runs each command in a fork of itself: the
child has stdin on /dev/null (as the shell block's), stdout and stderr on the given files, runs
``quafka.cli.main.main(argv)`` as the ``quafka`` console script does (``sys.exit(main())``) and
exits with that status, so one command's globals, signal handlers, loops and threads never reach
the next. The answer, on the file descriptor given as the first argument, is ``{"status": n}``
(a shell's exit status: 128 + the signal for a child killed by one).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

from quafka.cli import main as cli


def _child(argv: list[str], stdout: str, stderr: str) -> int:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, stdout), (2, stderr)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["quafka", *argv]
    try:
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)  # sys.exit("message"): printed, status 1
        return 1
    except BaseException:  # noqa: BLE001 - an uncaught exception: traceback and status 1, as python does
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def main() -> None:
    for name in cli.COMMANDS:
        importlib.import_module(f"quafka.cli.{name}")
    answers = os.fdopen(int(sys.argv[1]), "w")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                status = _child(request["argv"], request["stdout"], request["stderr"])
            finally:
                os._exit(status & 0xFF)
        _, wait_status = os.waitpid(pid, 0)
        status = os.waitstatus_to_exitcode(wait_status)
        answers.write(json.dumps({"status": status if status >= 0 else 128 - status}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
