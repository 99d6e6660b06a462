"""One interpreter for the python blocks of a document (tests/docs/test_snippets.py).

Reads one JSON request a line on stdin, ``{"name": ..., "code": ...}``, executes the code in the
namespace of the blocks before it (``__name__ == "__main__"``, as a script), and answers on the
file descriptor given as the first argument: ``{"ok": true}`` or ``{"ok": false, "error": ...}``.
The blocks' own output goes to this process's stdout and stderr.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
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
