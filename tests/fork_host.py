"""Commands a test would run as ``python ...`` in a process of their own, run instead in children
forked from a host that imported torch, spaCy and spacy_elmo once (tests/fork_server.py): each
child is still a process, with its own arguments, environment, working folder, streams and exit
status, started without the 4 to 6 CPU-s of those imports.

What the host read when it started, a child cannot read again: the variables that torch, its
kernels and Python read as they load (threads, kernel caps, ``PYTHON*``), so a command given
other values of those is refused (run it as a process of its own), and the entry points that
spaCy's registries found (a package with entry points installed after the host started is not
among them). Where such a start is what a test is about (a fresh interpreter, a cap set before
torch loads), the test starts a process of its own.
"""

from __future__ import annotations

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
from typing import Any, Dict, List, Mapping, Optional

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

    def run(
        self, command: List[str], environment: Mapping[str, str], timeout: float, cwd: Optional[str] = None
    ) -> subprocess.CompletedProcess:
        """``python COMMAND`` (a script, ``-m MODULE`` or ``-c CODE``, then arguments) in ``cwd`` (this
        process's folder by default); raises ValueError where ``environment`` gives a variable read
        at start another value than the host had."""
        differs = sorted(set(read_at_start(environment).items()) ^ set(self.started_with.items()))
        if differs:
            raise ValueError(
                f"{' '.join(command)[:200]}: the host read {sorted({name for name, _ in differs})} at its start, "
                "with other values: run the command in a process of its own."
            )
        assert self.process.stdin is not None
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"command": command, "environment": dict(environment), "cwd": cwd or os.getcwd()}
            request.update(stdout=str(out), stderr=str(err))
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            deadline = time.monotonic() + timeout
            try:
                child = self.message(deadline)["pid"]
            except TimeoutError:  # the host never started the run: not to be used again
                self.process.kill()
                raise RuntimeError(f"tests/fork_server.py started no run within {timeout} s") from None
            try:
                status = self.message(deadline)["status"]
            except TimeoutError:
                os.kill(child, signal.SIGKILL)
                self.message(time.monotonic() + 60)  # its status: the host is ready for the next run
                raise subprocess.TimeoutExpired([self.python, *command], timeout) from None
            stdout, stderr = out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")
        return subprocess.CompletedProcess([self.python, *command], status, stdout, stderr)

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

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ForkHosts:
    """A host for each run at a time (the bench smokes of a run of its own go two at once), kept
    until ``close``; a host that exited is not used again."""

    def __init__(self, python: Optional[str] = None) -> None:
        self.python = python
        self.lock = threading.Lock()
        self.idle: List[ForkHost] = []
        self.started: List[ForkHost] = []

    def run(
        self, command: List[str], environment: Mapping[str, str], timeout: float, cwd: Optional[str] = None
    ) -> subprocess.CompletedProcess:
        with self.lock:
            host = self.idle.pop() if self.idle else self._start()
        try:
            done = host.run(command, environment, timeout, cwd)  # a host that died raises RuntimeError: not kept
        except (subprocess.TimeoutExpired, ValueError):
            self._keep(host)  # its child killed, or the command refused: the host serves on
            raise
        self._keep(host)
        return done

    def _keep(self, host: ForkHost) -> None:
        with self.lock:
            self.idle.append(host)

    def _start(self) -> ForkHost:
        host = ForkHost(self.python)
        self.started.append(host)
        return host

    def close(self) -> None:
        for host in self.started:
            host.close()
