"""One interpreter for the python blocks of a document (tests/docs/test_snippets.py).

Reads one JSON request a line on stdin, ``{"name": ..., "code": ...}``, executes the code in the
namespace of the blocks before it (``__name__ == "__main__"``, as a script), and answers on the
file descriptor given as the first argument: ``{"ok": true}`` or ``{"ok": false, "error": ...}``.
The blocks' own output goes to this process's stdout and stderr.

It first imports kio as an installation without hypothesis does (the way the ``quafka`` command
does, quafka.protocol.kio_import.import_kio_without_test_strategies): in this test environment kio would
otherwise import hypothesis and pytest to register test strategies, ~0.5 s of each of the ~40
interpreters the documents' python blocks start, which no block uses.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    from quafka.protocol.kio_import import import_kio_without_test_strategies

    import_kio_without_test_strategies()
    answers = os.fdopen(int(sys.argv[1]), "w")
    namespace: dict = {"__name__": "__main__"}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            exec(compile(request["code"], request["name"], "exec"), namespace)
            answer = {"ok": True}
        except SystemExit as exc:
            answer = {"ok": exc.code in (None, 0), "error": f"SystemExit({exc.code!r})"}
        except BaseException:  # noqa: BLE001 - the block's failure is the answer
            answer = {"ok": False, "error": traceback.format_exc()}
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
