"""Every command in README.md and docs/ works as written (issue 15, acceptance 1).

Each document's ``sh``/``bash`` and ``python`` blocks run in order against a broker of its own;
``tests/docs/snippets.py`` says what is rewritten (free ports, the document's bootstrap server)
and how a block is marked as a server, a fragment or not run (with the reason and the test that
covers it instead). A shell block made only of plain ``quafka ...`` commands (no pipe, redirection,
variable or other shell syntax: snippets.quafka_commands) runs them in a warm interpreter, one fork
per command (_cli_session.py), instead of starting Python ~0.7 s per command; the same argv,
environment, directory and stdin, checked the same way (exit status 0, stopping at the first failure).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from docs.snippets import (DOCUMENTS, KNOWN_PORTS, REPO, Ports, Snippet, SnippetError, load, localize,
                           localize_command, parse, ports_waited_for, quafka_commands)
from quafka.client import Admin
from support import BrokerProcess, free_port, port_open, wait_until

SESSION = Path(__file__).with_name("_python_session.py")
CLI_SESSION = Path(__file__).with_name("_cli_session.py")
NOT_LINKED = {".git", "quafka-data", "dist", "build", ".pytest_cache"}
OUTPUT_TAIL = 4000


def _tail(text: str) -> str:
    return text if len(text) <= OUTPUT_TAIL else "...\n" + text[-OUTPUT_TAIL:]


class DocumentRun:
    """Runs one document's blocks; `close()` stops everything it started."""

    def __init__(self, document: str, snippets: list[Snippet], tmp_path: Path) -> None:
        self.document = document
        self.snippets = snippets
        self.ports = Ports({port: free_port() for port in KNOWN_PORTS})
        self.workdir = tmp_path / "work"
        self.workdir.mkdir()
        for entry in REPO.iterdir():
            if entry.name not in NOT_LINKED and not entry.name.endswith(".egg-info"):
                (self.workdir / entry.name).symlink_to(entry)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS")}
        self.env["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["PYTHONUNBUFFERED"] = "1"
        self.log_path = tmp_path / "output.log"
        self.broker: BrokerProcess | None = None
        self.server: subprocess.Popen | None = None
        self.server_log = tmp_path / "server.log"
        self.session: subprocess.Popen | None = None
        self.session_answers = None
        self.session_log = tmp_path / "python.log"
        self.cli: subprocess.Popen | None = None
        self.cli_answers = None
        self.tmp_path = tmp_path
        self.ran: list[str] = []

    # -- the whole document --------------------------------------------------------------------

    def run(self) -> None:
        runnable = [s for s in self.snippets if s.kind and not s.skip_reason]
        if runnable and not any(s.background for s in runnable):
            self.broker = BrokerProcess(str(self.tmp_path / "broker-data"), port=self.ports.mapping[9092]).start()
        for snippet in runnable:
            for command in snippet.before:
                self._shell(snippet, localize_command(command, self.ports), snippet.timeout_s, "before")
            code = localize(snippet, self.ports)
            if snippet.background:
                self._start_server(snippet, code)
            elif snippet.kind == "shell":
                self._shell(snippet, code, snippet.timeout_s, "block")
            else:
                self._python(snippet, code)
            self.ran.append(snippet.where)

    def close(self) -> None:
        self._stop_session()
        self._stop_cli()
        self._stop_server()
        if self.broker is not None and self.broker.proc is not None and self.broker.proc.poll() is None:
            self.broker.proc.terminate()
            try:
                self.broker.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.broker.kill()

    # -- shell -----------------------------------------------------------------------------------

    def _shell(self, snippet: Snippet, code: str, timeout_s: float, what: str) -> None:
        commands = quafka_commands(code)
        if commands is not None:
            self._quafka(snippet, code, commands, timeout_s, what)
            return
        try:
            proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=self.workdir, env=self.env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                                  start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{snippet.where}: the {what} did not end within {timeout_s:.0f} s:\n{code}\n"
                                 f"stdout: {_tail(exc.stdout or '')}\nstderr: {_tail(exc.stderr or '')}") from None
        with open(self.log_path, "a") as log:
            log.write(f"== {snippet.where} ({what})\n{code}\n{proc.stdout}{proc.stderr}\n")
        assert proc.returncode == 0, (f"{snippet.where}: the {what} exited with {proc.returncode}:\n{code}\n"
                                      f"stdout: {_tail(proc.stdout)}\nstderr: {_tail(proc.stderr)}")

    def _quafka(self, snippet: Snippet, code: str, commands: list[list[str]], timeout_s: float, what: str) -> None:
        """A block of plain ``quafka ...`` lines (snippets.quafka_commands): each in a fork of a warm
        interpreter, as bash -e would run them: in order, stopping at the first non-zero status."""
        if self.cli is None:
            read_fd, write_fd = os.pipe()
            self.cli = subprocess.Popen([str(REPO / ".venv" / "bin" / "python"), str(CLI_SESSION), str(write_fd)],
                                        cwd=self.workdir, env=self.env, stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        pass_fds=(write_fd,), start_new_session=True, text=True)
            os.close(write_fd)
            self.cli_answers = os.fdopen(read_fd)
        out_path, err_path = self.tmp_path / "cli.out", self.tmp_path / "cli.err"
        stdout = stderr = ""
        status = 0
        deadline = time.monotonic() + timeout_s
        for argv in commands:
            self.cli.stdin.write(json.dumps({"argv": argv, "stdout": str(out_path), "stderr": str(err_path)}) + "\n")
            self.cli.stdin.flush()
            ready, _, _ = select.select([self.cli_answers], [], [], max(0.0, deadline - time.monotonic()))
            answer_line = self.cli_answers.readline() if ready else ""
            if answer_line:
                status = json.loads(answer_line)["status"]
            stdout += out_path.read_text(errors="replace") if out_path.exists() else ""
            stderr += err_path.read_text(errors="replace") if err_path.exists() else ""
            if not answer_line:
                self._stop_cli()
                raise AssertionError(f"{snippet.where}: the {what} did not end within {timeout_s:.0f} s:\n{code}\n"
                                     f"stdout: {_tail(stdout)}\nstderr: {_tail(stderr)}")
            if status != 0:
                break
        with open(self.log_path, "a") as log:
            log.write(f"== {snippet.where} ({what}, quafka commands in a warm interpreter)\n{code}\n{stdout}{stderr}\n")
        assert status == 0, (f"{snippet.where}: the {what} exited with {status}:\n{code}\n"
                             f"stdout: {_tail(stdout)}\nstderr: {_tail(stderr)}")

    def _stop_cli(self) -> None:
        """The warm interpreter and any command of it still running (its process group)."""
        cli, self.cli = self.cli, None
        if cli is None:
            return
        if self.cli_answers is not None:
            self.cli_answers.close()
            self.cli_answers = None
        try:
            os.killpg(cli.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        cli.wait(10)

    def _start_server(self, snippet: Snippet, code: str) -> None:
        self._stop_server()
        wanted = ports_waited_for(code, self.ports)
        assert wanted, f"{snippet.where}: a background block that names no port to wait for:\n{code}"
        log = open(self.server_log, "ab")
        log.write(f"== {snippet.where}\n{code}\n".encode())
        log.flush()
        self.server = subprocess.Popen(["bash", "-c", code], cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        server = self.server
        wait_until(lambda: server.poll() is not None or all(port_open(p) for p in wanted), snippet.timeout_s,
                   message=f"{snippet.where}: the server to listen on {wanted}")
        assert server.poll() is None, (f"{snippet.where}: the server exited with {server.returncode}:\n{code}\n"
                                       f"{_tail(self.server_log.read_text(errors='replace'))}")

    def _stop_server(self) -> None:
        server, self.server = self.server, None
        if server is None or server.poll() is not None:
            return
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
            raise AssertionError(f"a server of {self.document} ignored SIGTERM for 20 s")

    # -- python ----------------------------------------------------------------------------------

    def _python(self, snippet: Snippet, code: str) -> None:
        if not snippet.continues:
            self._stop_session()
        if self.session is None:
            assert not snippet.continues, f"{snippet.where}: 'continues' with no python block before it"
            read_fd, write_fd = os.pipe()
            with open(self.session_log, "ab") as log:
                self.session = subprocess.Popen(
                    [str(REPO / ".venv" / "bin" / "python"), str(SESSION), str(write_fd)], cwd=self.workdir,
                    env=self.env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(write_fd,), start_new_session=True, text=True)
            os.close(write_fd)
            self.session_answers = os.fdopen(read_fd)
        with open(self.session_log, "a") as log:
            log.write(f"== {snippet.where}\n")
        self.session.stdin.write(json.dumps({"name": snippet.where, "code": code}) + "\n")
        self.session.stdin.flush()
        ready, _, _ = select.select([self.session_answers], [], [], snippet.timeout_s)
        answer_line = self.session_answers.readline() if ready else ""
        if not answer_line:
            output = self.session_log.read_text(errors="replace")
            self._stop_session(kill=True)
            raise AssertionError(f"{snippet.where}: the python block did not finish within {snippet.timeout_s:.0f} s "
                                 f"(or its interpreter died):\n{code}\noutput: {_tail(output)}")
        answer = json.loads(answer_line)
        if not answer["ok"]:
            raise AssertionError(f"{snippet.where}: the python block failed:\n{code}\n{answer.get('error')}\n"
                                 f"output: {_tail(self.session_log.read_text(errors='replace'))}")

    def _stop_session(self, kill: bool = False) -> None:
        session, self.session = self.session, None
        if session is None:
            return
        if self.session_answers is not None:
            self.session_answers.close()
            self.session_answers = None
        if not kill:
            session.stdin.close()
            try:
                session.wait(30)
                return
            except subprocess.TimeoutExpired:
                pass
        os.killpg(session.pid, signal.SIGKILL)
        session.wait(10)


# -- what some documents leave behind, checked afterwards ---------------------------------------

def _readme_accepted_everything(run: DocumentRun) -> None:
    """The README's loops accept what they consume: both groups have settled the ten jobs (offsets
    0-9; the confluent snippet once closed without accepting, which released every record)."""
    with Admin({"bootstrap.servers": run.ports.bootstrap}) as admin:
        for group in ("workers", "auditors"):
            [(start_offset, _lag)] = admin.list_share_group_offsets(group, ["jobs"]).values()
            assert start_offset == 10, (group, start_offset)


AFTERWARDS = {"README.md": _readme_accepted_everything}


@pytest.mark.parametrize("document", DOCUMENTS)
def test_document_snippets_run_as_written(document, tmp_path):
    snippets = load(document)
    run = DocumentRun(document, snippets, tmp_path)
    try:
        run.run()
        if document in AFTERWARDS:
            AFTERWARDS[document](run)
    finally:
        run.close()
    runnable = [s for s in snippets if s.kind]
    assert len(run.ran) == len([s for s in runnable if not s.skip_reason])


def test_every_block_is_tagged_and_every_skip_gives_its_reason():
    for document in DOCUMENTS:
        for snippet in load(document):  # raises SnippetError on an untagged block or a bad directive
            if snippet.skip_reason:
                assert len(snippet.skip_reason.split()) >= 4, f"{snippet.where}: say why it is not run"


# -- the rules themselves ------------------------------------------------------------------------

PORTS = Ports({9092: 40001, 9404: 40002, 19092: 40003})


def _shell_block(code: str) -> Snippet:
    return Snippet("x.md", 1, "sh", code)


@pytest.mark.parametrize("written, run_as", [
    ("quafka topics --list", "quafka topics --bootstrap-server 127.0.0.1:40001 --list"),
    (".venv/bin/quafka perf producer --topic t", ".venv/bin/quafka perf producer --bootstrap-server 127.0.0.1:40001 --topic t"),
    ("printf 'a\\n' | quafka console-producer --topic t", "printf 'a\\n' | quafka console-producer --bootstrap-server 127.0.0.1:40001 --topic t"),
    ("quafka share-groups --bootstrap-server localhost:9092 --list", "quafka share-groups --bootstrap-server localhost:40001 --list"),
    ("quafka demo --jobs 10", "quafka demo --jobs 10"),
    ("python -m quafka broker --override log.dirs=d", "python -m quafka broker --override listeners=PLAINTEXT://127.0.0.1:40001 --override log.dirs=d"),
    ("quafka broker --override metrics.listener=http://0.0.0.0:9404",
     "quafka broker --override listeners=PLAINTEXT://127.0.0.1:40001 --override metrics.listener=http://0.0.0.0:40002"),
    ("make run        # starts a broker", 'make -o .venv/.installed-run run DASHBOARD= ARGS="--override listeners=PLAINTEXT://127.0.0.1:40001"        # starts a broker'),
    ('make run ARGS="--override listeners=PLAINTEXT://127.0.0.1:19092"', 'make -o .venv/.installed-run run DASHBOARD= ARGS="--override listeners=PLAINTEXT://127.0.0.1:40003"'),
    ('make run ARGS="--override num.partitions=3"', 'make -o .venv/.installed-run run DASHBOARD= ARGS="--override listeners=PLAINTEXT://127.0.0.1:40001 --override num.partitions=3"'),
    ('make run DASHBOARD=http://127.0.0.1:9404', 'make -o .venv/.installed-run run ARGS="--override listeners=PLAINTEXT://127.0.0.1:40001" DASHBOARD=http://127.0.0.1:40002'),
    ("# quafka topics --list", "# quafka topics --list"),
    ("quafka topics \\\n    --list", "quafka topics --bootstrap-server 127.0.0.1:40001     --list"),
])
def test_localize_rewrites_only_addresses(written, run_as):
    assert localize(_shell_block(written + "\n"), PORTS) == run_as + "\n"


def test_python_blocks_only_get_their_ports_changed():
    code = 'ShareConsumer({"bootstrap.servers": "127.0.0.1:9092"})  # quafka topics --list\n'
    assert localize(Snippet("x.md", 1, "python", code), PORTS) == code.replace("9092", "40001")


@pytest.mark.parametrize("code, argvs", [
    ("quafka topics --list\n# a comment\n\n.venv/bin/quafka acls --add --allow-principal 'User:*'  # all\n",
     [["topics", "--list"], ["acls", "--add", "--allow-principal", "User:*"]]),
    ("quafka configs --add-config 'SCRAM-SHA-512=[password=x]' --entity-name \"a b\"\n",
     [["configs", "--add-config", "SCRAM-SHA-512=[password=x]", "--entity-name", "a b"]]),
    ("seq 0 9 | quafka console-producer --topic t\n", None),
    ("quafka topics --list > topics.txt\n", None),
    ("quafka topics --describe --topic \"$TOPIC\"\n", None),
    ("quafka topics --list\nls\n", None),
    ("cd tutorial && quafka topics --list\n", None),
    ("QUAFKA_X=1 quafka topics --list\n", None),
    ("python -m quafka topics --list\n", None),
    ("quafka topics --list &\n", None),
    ("# only a comment\n", None),
])
def test_only_blocks_of_plain_quafka_commands_skip_the_shell(code, argvs):
    """Such blocks run in the warm CLI interpreter; anything a shell would interpret runs with bash."""
    assert quafka_commands(code) == argvs


def test_a_background_server_is_waited_for_on_the_ports_it_names():
    code = localize(_shell_block("quafka broker --override metrics.listener=http://0.0.0.0:9404\n"), PORTS)
    assert ports_waited_for(code, PORTS) == [40001, 40002]


@pytest.mark.parametrize("text, complaint", [
    ("```\nls\n```\n", "without a language"),
    ("```ruby\nputs 1\n```\n", "unknown code block language"),
    ("<!-- snippet: skip -->\n```sh\nls\n```\n", "needs a reason"),
    ("<!-- snippet: sometimes -->\n```sh\nls\n```\n", "unknown snippet directive"),
    ("<!-- snippet: background -->\n```python\nx = 1\n```\n", "only a shell block"),
    ("<!-- snippet: skip: not shown here at all -->\n```text\nout\n```\n", "not run"),
    ("```sh\nls\n", "never closed"),
    ("<!-- snippet skip: typo -->\n```sh\nls\n```\n", "malformed"),
])
def test_broken_blocks_are_refused(text, complaint):
    with pytest.raises(SnippetError, match=complaint):
        parse("x.md", text)


def test_a_failing_block_fails_the_document(tmp_path):
    """The runner reports a block that fails (shell exit status, python exception) with where it is."""
    cases = [("```sh\nquafka topics --describe --topic nosuch\n```\n", r"x\.md:1: the block exited with 1"),
             ("```sh\nquafka topics --create --topic once\nquafka topics --create --topic once\nquafka topics --list\n```\n",
              r"(?s)x\.md:1: the block exited with 1.*already exists"),  # warm CLI: the status and stderr
             ("```python\nraise ValueError('boom')\n```\n", "ValueError: boom"),
             ("```python\nx = 1\n```\n<!-- snippet: continues -->\n```python\nassert x == 2\n```\n",
              r"x\.md:5: the python block failed"),
             ("```python\nx = 1\n```\n\n```python\nprint(x)\n```\n", "NameError")]  # a fresh interpreter
    for i, (text, expected) in enumerate(cases):
        (tmp_path / str(i)).mkdir()
        run = DocumentRun("x.md", parse("x.md", text), tmp_path / str(i))
        try:
            with pytest.raises(AssertionError, match=expected):
                run.run()
        finally:
            run.close()

