"""Commands a test would run as ``python ...`` in a process of their own, run instead in children
forked from a host that imported torch, spaCy and spacy_elmo once (tests/fork_server.py): each
child is still a process, with its own arguments, environment, working folder, streams and exit
status, started without importing them again (seconds of CPU each: CONTRIBUTING.md, "Processes").

What the host read when it started, a child cannot read again: the variables that torch, its
kernels and Python read as they load (threads, kernel caps, ``PYTHON*``), so a command given
other values of those is refused (run it as a process of its own), and the entry points that
spaCy's registries found (a package with entry points installed after the host started is not
among them). Where such a start is what a test is about (a fresh interpreter, a cap set before
torch loads), the test starts a process of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional

SERVER = Path(__file__).resolve().parent / "fork_server.py"
# Read by Python, torch and the kernel libraries as they load: a child would keep the host's.
READ_AT_START = ("PYTHON", "OMP_", "GOMP_", "KMP_", "MKL_", "ONEDNN_", "DNNL_", "ATEN_", "TORCH_", "LD_")


def read_at_start(environment: Mapping[str, str]) -> Dict[str, str]:
    """The variables of ``environment`` that a process reads as it loads (``READ_AT_START``)."""
    return {name: value for name, value in environment.items() if name.startswith(READ_AT_START)}


class ForkHost:
    """A tests/fork_server.py process under ``python`` (this one's by default): commands run one at
    a time in children forked from it."""

    def __init__(self, python: Optional[str] = None) -> None:
        self.python = str(python or sys.executable)
        self.started_with = read_at_start(os.environ)
        self.process = subprocess.Popen([self.python, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.received = b""
        self.running: Optional[ForkedChild] = None  # a child started and not yet waited for

    def run(
        self, command: List[str], environment: Mapping[str, str], timeout: float, cwd: Optional[str] = None
    ) -> subprocess.CompletedProcess:
        """``python COMMAND`` (a script, ``-m MODULE`` or ``-c CODE``, then arguments) in ``cwd`` (this
        process's folder by default), to its end: its status and what it printed."""
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            child = self.start(command, environment, out, err, cwd, timeout)
            status = child.wait(timeout)
            stdout, stderr = out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")
        return subprocess.CompletedProcess([self.python, *command], status, stdout, stderr)

    def start(
        self,
        command: List[str],
        environment: Mapping[str, str],
        stdout: Path,
        stderr: Path,
        cwd: Optional[str] = None,
        timeout: float = 60,
    ) -> "ForkedChild":
        """``python COMMAND`` started, its output to ``stdout`` and ``stderr`` (one file where they are
        the same); the host runs nothing else until it ends. Raises ValueError where ``environment``
        gives a variable read at start another value than the host had, RuntimeError where the host
        starts nothing within ``timeout`` seconds (it is killed)."""
        differs = sorted(set(read_at_start(environment).items()) ^ set(self.started_with.items()))
        if differs:
            raise ValueError(
                f"{' '.join(command)[:200]}: the host read {sorted({name for name, _ in differs})} at its start, "
                "with other values: run the command in a process of its own."
            )
        assert self.process.stdin is not None
        request = {"command": command, "environment": dict(environment), "cwd": cwd or os.getcwd()}
        request.update(stdout=str(stdout), stderr=str(stderr))
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        try:
            pid = self.message(time.monotonic() + timeout)["pid"]
        except TimeoutError:  # the host never started the run: not to be used again
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"tests/fork_server.py started no run within {timeout} s") from None
        self.running = ForkedChild(self, pid, [self.python, *command])
        return self.running

    def message(self, deadline: float) -> Dict[str, Any]:
        """The host's next line, by ``deadline`` (time.monotonic()); TimeoutError after it."""
        assert self.process.stdout is not None
        pipe = self.process.stdout.fileno()
        while b"\n" not in self.received:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                raise TimeoutError("no line from tests/fork_server.py by the deadline")
            chunk = os.read(pipe, 65536)
            if not chunk:
                raise RuntimeError(f"tests/fork_server.py exited with status {self.process.wait()}")
            self.received += chunk
        line, self.received = self.received.split(b"\n", 1)
        return json.loads(line)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def settle(self) -> None:
        """Kill a child still running (its caller ended midway) and read its status, so that the
        host's next line answers the next command."""
        if self.running is not None and self.alive:
            with contextlib.suppress(subprocess.TimeoutExpired, TimeoutError, RuntimeError):
                self.running.kill()
                self.running.wait(60)

    def close(self) -> None:
        """Stop the host, and first its child where one still runs."""
        assert self.process.stdin is not None
        self.settle()
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ForkedChild:
    """A command running in a child of ``host``: its ``pid``, and its status once it ends (a
    negative status: killed by that signal)."""

    def __init__(self, host: ForkHost, pid: int, args: List[str]) -> None:
        self.host, self.pid, self.args = host, pid, args
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        """Its status where it has ended, else None."""
        if self.returncode is None:
            try:
                self.ended(self.host.message(time.monotonic())["status"])
            except TimeoutError:
                return None
        return self.returncode

    def wait(self, timeout: float) -> int:
        """Its status once it ends; killed (SIGKILL) where it runs past ``timeout`` seconds, then
        TimeoutExpired (the host serves the next command)."""
        if self.returncode is None:
            try:
                self.ended(self.host.message(time.monotonic() + timeout)["status"])
            except TimeoutError:
                self.kill()
                self.ended(self.host.message(time.monotonic() + 60)["status"])  # the host serves the next
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        assert self.returncode is not None
        return self.returncode

    def ended(self, status: int) -> None:
        self.returncode = status
        self.host.running = None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


class ForkHosts:
    """A host for each run at a time (the bench smokes of a run of its own go two at once), kept
    until ``close``; a host that exited is not used again."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: List[ForkHost] = []
        self.started: List[ForkHost] = []

    def run(
        self, command: List[str], environment: Mapping[str, str], timeout: float, cwd: Optional[str] = None
    ) -> subprocess.CompletedProcess:
        """``ForkHost.run`` in an idle host, or one started for it."""
        with self.lease() as host:
            return host.run(command, environment, timeout, cwd)

    @contextlib.contextmanager
    def lease(self) -> Iterator[ForkHost]:
        """An idle host, or one started for it, the block's alone: for a command that the block
        starts and waits for itself (``ForkHost.start``). However the block ends, a child it left
        running is killed; the host is kept for the next unless it died."""
        with self.lock:
            host = self.idle.pop() if self.idle else self._start()
        try:
            yield host
        finally:
            host.settle()
            if host.alive and host.running is None:
                self._keep(host)

    def _keep(self, host: ForkHost) -> None:
        with self.lock:
            self.idle.append(host)

    def _start(self) -> ForkHost:
        host = ForkHost()
        self.started.append(host)
        return host

    def close(self) -> None:
        for host in self.started:
            host.close()
