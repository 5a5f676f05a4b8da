"""`python -m spacy_elmo serve` as a user starts it, in a process session of its own: its output as
it comes, its URL once it listens, the processes of its session and the sockets they listen on
(read from Linux's /proc, independently of the package)."""

import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Sequence

import httpx
from conftest import with_this_checkout

LISTENING = re.compile(r"Listening on (http://\S+):(?:\s|$)")
# What a clean start or drain never prints: Ray's abort before the service handled SIGTERM, Ray's
# lines about its own start and shutdown, errors.
ALARMING = ("SIGTERM received", "failed", "killed by", "New http_options", "Traceback", "Error")
# httpx.get and httpx.post make a client per call, and each client a TLS context loaded with
# certifi's certificates: CPU spent by the tests' clients, not by the service. The services here
# are plain HTTP on 127.0.0.1; each call still opens its own connection, with this context.
TLS = ssl.create_default_context()


def http_get(url: str, **options) -> httpx.Response:
    """``httpx.get`` without a TLS context of its own."""
    return httpx.get(url, verify=TLS, **options)


def http_post(url: str, **options) -> httpx.Response:
    """``httpx.post`` without a TLS context of its own."""
    return httpx.post(url, verify=TLS, **options)


def free_port() -> int:
    """A port free now that the system never hands out by itself (it takes ports for outgoing
    connections and for bind(0) from /proc/sys/net/ipv4/ip_local_port_range): a port from bind(0)
    could be given to another socket before the process it is meant for binds it."""
    bounds = Path("/proc/sys/net/ipv4/ip_local_port_range")
    lowest = int(bounds.read_text().split()[0]) if bounds.is_file() else 32768
    for port in random.Random().sample(range(20000, min(lowest, 32768)), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between 20000 and {lowest}")


def cli_without(hidden: Sequence[str]) -> List[str]:
    """``python -m spacy_elmo`` where the modules ``hidden`` cannot be imported, as where they are not
    installed (None in sys.modules: ``import`` raises ModuleNotFoundError, ``find_spec`` finds nothing)."""
    if not hidden:
        return [sys.executable, "-m", "spacy_elmo"]
    run = f"import runpy, sys; sys.modules.update(dict.fromkeys({list(hidden)!r})); "
    return [sys.executable, "-c", run + "runpy.run_module('spacy_elmo', run_name='__main__', alter_sys=True)"]


class Served:
    """The CLI serving ``source`` on ``engine`` with ``options``, on a free port of 127.0.0.1 (port
    0 where the service reports the port it got, one found free for Ray's proxy), with the modules
    ``hidden`` not installed (``cli_without``)."""

    def __init__(self, source, *options: str, engine: str = "process", hidden: Sequence[str] = ()) -> None:
        port = "0" if engine == "process" else str(free_port())
        command = [*cli_without(hidden), "serve", str(source), "--threads", "1", "--port", port]
        command += ["--engine", engine, *options]
        self.process = subprocess.Popen(
            command, env=with_this_checkout(), start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self.lines: List[str] = []
        self._arrived = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self._arrived:
                self.lines.append(line.decode(errors="replace"))
                self._arrived.notify_all()
        with self._arrived:
            self.lines.append("")  # the end of the output
            self._arrived.notify_all()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def printed(self, text: str, seconds: float) -> bool:
        """Whether the service printed ``text`` within ``seconds`` (False once it exited without)."""
        with self._arrived:
            return self._arrived.wait_for(lambda: text in self.output or self.lines[-1:] == [""], seconds) and (
                text in self.output
            )

    @property
    def url(self) -> str:
        found = LISTENING.search(" ".join(self.output.split()))
        assert found, f"serve printed no address: {self.output[-3000:]}"
        return found.group(1)

    def ready(self, seconds: float = 240) -> str:
        """The URL, once /ready answers 200; fails the test with the output otherwise."""
        assert self.printed("Listening on", seconds), f"serve did not come up: {self.output[-3000:]}"
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if http_get(f"{self.url}/ready", timeout=10).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"serve did not become ready: {self.output[-3000:]}")

    def ended(self, seconds: float = 120) -> int:
        """Its exit status, once it exited (killed, and the test failed, after ``seconds``)."""
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"serve was still running after {seconds} s: {self.output[-3000:]}") from None

    def kill(self) -> None:
        """SIGKILL to everything in its session."""
        for pid in [self.process.pid, *session_processes(self.process.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()

    def stop(self) -> None:
        """Ctrl-C, as a user stops it; SIGKILL to its session where it is still running a minute later."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


def session_processes(session: int) -> List[int]:
    """The processes still running (not zombies) in process session ``session``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def listening_addresses(pids: List[int]) -> List[str]:
    """The local addresses ("127.0.0.1:8000", "[::]:6379") of the TCP sockets ``pids`` listen on."""
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        inodes |= {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    found = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(_address(fields[1], width))
    return found


def _address(hex_address: str, width: int) -> str:
    """/proc/net/tcp's "0100007F:1F40" as "127.0.0.1:8000" (IPv6 in brackets)."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word little-endian
    family = socket.AF_INET if width == 4 else socket.AF_INET6
    text = socket.inet_ntop(family, words)
    return f"{text}:{int(port, 16)}" if width == 4 else f"[{text}]:{int(port, 16)}"


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host.startswith("127.") or host == "::1"


def alarms(output: str) -> List[str]:
    """The phrases of ``ALARMING`` in ``output`` (a service's output wraps its lines)."""
    joined = " ".join(output.split())
    return [phrase for phrase in ALARMING if phrase in joined]


def wait_for(condition, seconds) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


def samples_of(text, name) -> float:
    """The sum of metric ``name``'s samples in Prometheus ``text``."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def sigterm_with_requests_in_flight(served: Served, count: int = 6) -> list:
    """SIGTERM to the service once ``count`` heavy requests are in it (its metrics say so); their
    answers, once it exited (its exit status checked by the caller)."""
    from concurrent.futures import ThreadPoolExecutor

    body = {"texts": [" ".join(["word"] * 300)] * 16}
    with ThreadPoolExecutor(count) as pool:
        in_flight = [pool.submit(http_post, f"{served.url}/embed", json=body, timeout=120) for _ in range(count)]
        admitted = "spacy_elmo_requests_in_service"
        # 120 s: with the suite's other worker busy on the same cores, Ray's proxy admits them slowly
        in_service = wait_for(lambda: samples_of(http_get(f"{served.url}/metrics").text, admitted) >= count, 120)
        assert in_service, f"{count} requests were not all in the service within 120 s: {served.output[-2000:]}"
        served.process.send_signal(signal.SIGTERM)
        return [future.result() for future in in_flight]
