"""The service in one process (``--engine process``, the default for one replica on one machine):
uvicorn serves the gateway (``gateway.Gateway``) on the address asked for, and the gateway hands
each embedding request to the replica (``embedder.Embedder``) in the same process. A request
crosses no process boundary: its body is read once, its answer written once, and the only thread
hop is to the replica's worker thread and back.

The port is bound before the pipeline loads (a port in use is said at once), and listened on once
it has loaded: until then a connection is refused rather than left waiting for the load. SIGTERM
(the service's handler, ``sigterm.ServiceSigterm``, calls ``terminate``) drains: the gateway refuses
new embedding requests with 503 and waits for those in the service; uvicorn then sends their answers
and closes. SIGINT stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from typing import Any, Callable, Iterator, Optional

import uvicorn

from .embedder import Embedder
from .gateway import Gateway
from .settings import ServeSettings

OnDrain = Callable[[int], None]
BACKLOG = 2048  # connections the system queues for the server (uvicorn's default)


class ProcessEngine:
    """The service on uvicorn in this process: ``start`` (bind, load), ``serve`` (until a signal),
    ``stop``."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.listener: Optional[socket.socket] = None
        self.embedder: Optional[Embedder] = None
        self.gateway: Optional[Gateway] = None
        self.server: Optional[_DrainingServer] = None

    @property
    def url(self) -> str:
        """Where the service answers: the port bound (the one the system chose for port 0)."""
        if self.listener is None:
            raise RuntimeError("ProcessEngine.url needs ProcessEngine.start first")
        host, port = self.listener.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        """Bind the port, then load the pipeline; a ValueError that says what to do where the port
        cannot be bound."""
        self.listener = bound_socket(self.settings.host, self.settings.port)
        self.embedder = Embedder(self.settings)
        self.gateway = Gateway(self.settings, self.embedder)
        self.server = _DrainingServer(_uvicorn_config(self.gateway.asgi), self.gateway)
        self.listener.listen(BACKLOG)  # connections wait here until the server's loop takes them

    def serve(self, drain_s: float, on_drain: OnDrain) -> None:
        """Listen and answer until ``terminate`` (a drain of up to ``drain_s`` seconds, then
        ``on_drain(left)``, ``left`` the requests unanswered) or SIGINT (at once)."""
        if self.server is None or self.listener is None:
            raise RuntimeError("ProcessEngine.serve needs ProcessEngine.start first")
        self.server.drain_s, self.server.on_drain = drain_s, on_drain
        self.server.run(sockets=[self.listener])

    def terminate(self) -> None:
        """Drain, then stop serving (the service's SIGTERM; see ``service.Engine``)."""
        if self.server is not None:
            self.server.ask_to_drain()

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()
        if self.embedder is not None:
            self.embedder.worker.shutdown(wait=False, cancel_futures=True)


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port``, not yet listening."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as unknown:
        raise ValueError(f"serve: --host {host!r} is not an address of this machine ({unknown})") from None
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as taken:
        listener.close()
        raise ValueError(
            f"serve: cannot listen on {host}:{port} ({taken.strerror}): give another --port, or stop what "
            "listens there."
        ) from None
    return listener


def _uvicorn_config(app: Any) -> uvicorn.Config:
    """uvicorn's settings for the service: no lifespan, access log or proxy headers (the service
    has its own metrics and trusts no forwarding proxy)."""
    return uvicorn.Config(
        app,
        interface="asgi3",
        lifespan="off",
        access_log=False,
        proxy_headers=False,
        log_level="warning",
        timeout_graceful_shutdown=30,
    )


class _DrainingServer(uvicorn.Server):
    """uvicorn's server with the service's signals: a drain through the gateway before uvicorn's own
    graceful shutdown where ``ask_to_drain`` is called (the service's SIGTERM), and SIGINT stops at
    once. uvicorn's own handlers are not installed."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway
        self.drain_s: float = 0.0
        self.on_drain: OnDrain = lambda left: None
        self.drain_asked = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._draining: Optional["asyncio.Task[None]"] = None

    def ask_to_drain(self) -> None:
        """Drain once the loop runs (at once where it does). Called from a signal handler, between
        two steps of the main thread, which runs the loop: it only schedules."""
        self.drain_asked = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._drain)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = self._loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._interrupt)
        if self.drain_asked:  # asked before the loop ran
            self._drain()
        try:
            yield
        finally:
            self._loop = None  # closed soon after: a later ask has nothing to drain
            loop.remove_signal_handler(signal.SIGINT)

    def _drain(self) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        left = await self.gateway.drained(self.drain_s)
        self.on_drain(left)
        self.should_exit = True

    def _interrupt(self) -> None:
        self.should_exit = self.force_exit = True
