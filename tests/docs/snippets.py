"""The code blocks of README.md and docs/*.md, and how a test runs them as written (issue 15).

Every fenced block carries a language. ``sh``/``bash`` blocks are shell commands and ``python``
blocks are programs: the test runs them, in the order the document gives them, against one broker
per document. Other languages (``text``, ``yaml``, ``properties``, ...) are output, files or
layouts, and are not run. A block may be preceded by directives, HTML comments that a reader of
the rendered page does not see::

    <!-- snippet: skip: <why, and which test covers it> -->   not run (a reason is required)
    <!-- snippet: background -->     a long-running server (a broker): started, waited for until
                                     its ports answer, stopped when the next one starts or at the end
    <!-- snippet: continues -->      python: runs in the interpreter of the block before (a fragment
                                     using its names); otherwise each python block gets a fresh one
    <!-- snippet: before: <shell command> -->   runs first (state the prose assumes; visible in the source)
    <!-- snippet: timeout: <seconds> -->        instead of the default 120

What the test changes, and nothing else (``localize``): the well-known ports 9092, 9404 and 19092
become free ports, so that documents run in parallel and next to a developer's own broker; a
``quafka`` tool with no ``--bootstrap-server`` gets the document's broker (the tools default to
127.0.0.1:9092), and a ``quafka broker`` / ``make run`` with no ``listeners`` gets one on the
document's port (and no web dashboard: ``DASHBOARD=``, its port being fixed); ``make run`` does
not redo its install step (``make -o``), whose editable
install would point the shared ``.venv`` at a temporary directory. Commands run from a temporary
directory whose entries link to the checkout's, with ``.venv/bin`` first on ``PATH``: as in a
checkout where quafka is installed, with files the commands write landing in the temporary
directory.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = ["README.md"] + sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))

RUN = {"sh": "shell", "bash": "shell", "python": "python"}
SHOWN = {"text", "yaml", "properties", "csv", "json"}
KNOWN_PORTS = (9092, 9404, 19092)
DEFAULT_TIMEOUT_S = 120.0

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:\s*(?P<key>[\w-]+)\s*(?::\s*(?P<value>.*?))?\s*-->\s*$")
_DIRECTIVE_KEYS = {"skip", "background", "continues", "before", "timeout"}
_TOOLS = r"(?:topics|configs|share-groups|consumer-groups|transactions|console-share-consumer|console-producer|perf[ \t]+(?:producer|share-consumer))"
_QUAFKA = r"(?:(?:\S*/)?quafka|(?:\S*/)?python3?[ \t]+-m[ \t]+quafka)"
_TOOL_CALL = re.compile(rf"(?P<call>{_QUAFKA}[ \t]+{_TOOLS})(?=\s|$)")
_BROKER_CALL = re.compile(rf"(?P<call>{_QUAFKA}[ \t]+broker)(?=\s|$)")
_MAKE_RUN = re.compile(r"(?P<make>\bmake)(?P<rest>[ \t]+run)(?=\s|$)")
_PORT = re.compile(r"(?P<host>127\.0\.0\.1|localhost|0\.0\.0\.0):(?P<port>%s)\b" % "|".join(map(str, KNOWN_PORTS)))


class SnippetError(ValueError):
    """A document's blocks break the rules above (untagged fence, unknown directive, ...)."""


@dataclass
class Snippet:
    path: str
    line: int                                 # of the opening fence, 1-based
    lang: str
    code: str
    directives: dict[str, list[str]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def kind(self) -> str | None:
        return RUN.get(self.lang)

    @property
    def skip_reason(self) -> str | None:
        reasons = self.directives.get("skip")
        return reasons[0] if reasons else None

    @property
    def background(self) -> bool:
        return "background" in self.directives

    @property
    def continues(self) -> bool:
        return "continues" in self.directives

    @property
    def before(self) -> list[str]:
        return self.directives.get("before", [])

    @property
    def timeout_s(self) -> float:
        values = self.directives.get("timeout")
        return float(values[0]) if values else DEFAULT_TIMEOUT_S


def parse(path: str, text: str) -> list[Snippet]:
    """The fenced blocks of a Markdown text, with their directives; SnippetError on a broken rule."""
    lines = text.split("\n")
    snippets: list[Snippet] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, lang = match.group("indent"), match.group("lang")
        end = i + 1
        while end < len(lines) and not re.match(r"^[ \t]*```[ \t]*$", lines[end]):
            end += 1
        if end == len(lines):
            raise SnippetError(f"{path}:{i + 1}: a code block that is never closed")
        if not lang:
            raise SnippetError(f"{path}:{i + 1}: a code block without a language; use sh, bash or "
                               f"python for what can run, or one of {sorted(SHOWN)} for what is shown")
        if lang not in RUN and lang not in SHOWN:
            raise SnippetError(f"{path}:{i + 1}: unknown code block language {lang!r}")
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end]]
        snippet = Snippet(path, i + 1, lang, "\n".join(body) + "\n", _directives_above(path, lines, i))
        if snippet.directives and snippet.kind is None:
            raise SnippetError(f"{snippet.where}: directives on a {lang!r} block, which is not run")
        if "skip" in snippet.directives and not snippet.skip_reason:
            raise SnippetError(f"{snippet.where}: 'skip' needs a reason ('<!-- snippet: skip: why -->')")
        if snippet.background and snippet.kind != "shell":
            raise SnippetError(f"{snippet.where}: only a shell block can be a background server")
        if snippet.continues and snippet.kind != "python":
            raise SnippetError(f"{snippet.where}: only a python block continues the one before")
        snippets.append(snippet)
        i = end + 1
    return snippets


def _directives_above(path: str, lines: list[str], fence: int) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    j = fence - 1
    while j >= 0 and (not lines[j].strip() or _DIRECTIVE.match(lines[j])):
        match = _DIRECTIVE.match(lines[j])
        if match:
            key = match.group("key")
            if key not in _DIRECTIVE_KEYS:
                raise SnippetError(f"{path}:{j + 1}: unknown snippet directive {key!r}; "
                                   f"known: {sorted(_DIRECTIVE_KEYS)}")
            directives.setdefault(key, []).insert(0, match.group("value") or "")
        j -= 1
    for line in lines[max(0, j - 2):fence]:
        if "<!--" in line and "snippet" in line and not _DIRECTIVE.match(line):
            raise SnippetError(f"{path}: a malformed snippet directive: {line.strip()!r}")
    return directives


def load(document: str) -> list[Snippet]:
    return parse(document, (REPO / document).read_text())


@dataclass(frozen=True)
class Ports:
    """The free port each well-known port of the documents stands for."""
    mapping: dict[int, int]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.mapping[9092]}"


def localize(snippet: Snippet, ports: Ports) -> str:
    """The snippet's code with the documented rewrites (module docstring) applied."""
    code = _PORT.sub(lambda m: f"{m.group('host')}:{ports.mapping[int(m.group('port'))]}", snippet.code)
    if snippet.kind != "shell":
        return code
    return "\n".join(_localize_command(line, ports) for line in _logical_lines(code.rstrip("\n"))) + "\n"


def localize_command(command: str, ports: Ports) -> str:
    """A shell command (a ``before`` directive) localized as a shell block is."""
    code = _PORT.sub(lambda m: f"{m.group('host')}:{ports.mapping[int(m.group('port'))]}", command)
    return _localize_command(code, ports)


def _logical_lines(code: str) -> list[str]:
    """Lines with their backslash continuations joined (so a rewrite sees the whole command)."""
    out: list[str] = []
    pending = ""
    for line in code.split("\n"):
        if line.endswith("\\") and not line.lstrip().startswith("#"):
            pending += line[:-1]  # bash removes backslash-newline
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _localize_command(line: str, ports: Ports) -> str:
    if line.lstrip().startswith("#"):
        return line
    listener = f"PLAINTEXT://127.0.0.1:{ports.mapping[9092]}"
    command = _strip_comment(line)
    if "--bootstrap-server" not in command:
        line = _TOOL_CALL.sub(lambda m: f"{m.group('call')} --bootstrap-server {ports.bootstrap}", line)
    if "listeners=" not in command:
        line = _BROKER_CALL.sub(lambda m: f"{m.group('call')} --override listeners={listener}", line)
    if _MAKE_RUN.search(command):
        if "listeners=" not in command:
            if 'ARGS="' in line:
                line = line.replace('ARGS="', f'ARGS="--override listeners={listener} ', 1)
            else:
                line = _MAKE_RUN.sub(lambda m: f'{m.group("make")}{m.group("rest")} ARGS="--override listeners={listener}"', line, count=1)
        if "DASHBOARD=" not in command:  # the web dashboard's fixed port 8080 (docs/dashboard.md): off
            line = _MAKE_RUN.sub(lambda m: f"{m.group('make')}{m.group('rest')} DASHBOARD=", line, count=1)
        line = _MAKE_RUN.sub(lambda m: f"{m.group('make')} -o .venv/.installed-run{m.group('rest')}", line, count=1)
    return line


def _strip_comment(line: str) -> str:
    """The command part of a shell line (a ``#`` after whitespace, outside quotes, starts a comment)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


# A line the shell would treat as more than one program and its words: pipes, redirections, lists,
# substitutions, globs, braces, history, variables, escapes. Such a line (and its block) runs with bash.
_SHELL_SYNTAX = set("|&;<>()$`*?[]{}~!\\")


def _without_single_quoted(command: str) -> str:
    """The command without its single-quoted spans (bash takes them literally); a ``'`` inside
    double quotes is not a quote."""
    out, quote = [], None
    for char in command:
        if quote == "'":
            if char == "'":
                quote = None
            continue
        if char == quote:
            quote = None
        elif quote is None and char in "'\"":
            quote = char
            if char == "'":
                continue
        out.append(char)
    return "".join(out)


def quafka_commands(code: str) -> list[list[str]] | None:
    """The argv of each command of a localized shell block if every line is a plain ``quafka ...``
    command (or blank, or a comment): words only, no shell syntax outside single quotes (see
    _SHELL_SYNTAX; the first word is ``quafka``, so no ``NAME=value`` assignment). None otherwise: the
    block then runs with bash as written. Such commands run in a warm interpreter, one fork each
    (tests/docs/_cli_session.py), with what bash gives them: the same argv, environment, working
    directory and /dev/null stdin, stopping at the first that fails (``bash -e``)."""
    commands = []
    for line in code.split("\n"):
        command = _strip_comment(line).strip()
        if not command:
            continue
        if _SHELL_SYNTAX & set(_without_single_quoted(command)):
            return None
        try:
            words = shlex.split(command)
        except ValueError:
            return None
        if words[0] not in ("quafka", ".venv/bin/quafka"):  # the same program: .venv/bin is first on PATH
            return None
        commands.append(words[1:])
    return commands or None


def ports_waited_for(code: str, ports: Ports) -> list[int]:
    """The free ports a localized background command listens on (the ones it names)."""
    found = {int(m.group("port")) for m in re.finditer(r"(?:127\.0\.0\.1|localhost|0\.0\.0\.0):(?P<port>\d+)", code)}
    return sorted(p for p in ports.mapping.values() if p in found)
