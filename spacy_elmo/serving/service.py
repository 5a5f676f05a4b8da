"""``python -m spacy_elmo serve``: the pipeline behind HTTP. The engine is decided once, from the
settings (``ServeSettings.runs_on_ray``): one replica on this machine runs in this process
(``process_engine``: uvicorn, the gateway and the pipeline together); more replicas, or a cluster,
run on Ray Serve (``ray_engine``). Both put the same gateway (``gateway.Gateway``: routes, key,
limits, metrics, drain) in front of the same replica (``embedder.Embedder``: the pipeline and its
continuous batching).

Signals, from the moment ``run`` is called: SIGTERM before the service answers stops what was
started and returns (nothing was admitted: ``Stopped``); once it answers, SIGTERM drains (requests
in the service are answered, new ones refused with 503, for up to ``DRAIN_S`` seconds) and stops;
SIGINT (Ctrl-C) stops at once. SIGTERM is handled here alone, for both engines (``ServiceSigterm``):
an engine says what a drain is (``Engine.terminate``) and keeps the handler across what would
replace it (``sigterm_kept``, around Ray's start).
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Callable, Iterator, Optional, Protocol

from .settings import ServeSettings

DRAIN_S = 60.0  # how long SIGTERM waits for the requests in the service


class Stopped(Exception):
    """SIGTERM arrived before the service answered: it stopped without admitting a request."""


class Engine(Protocol):
    """What runs the service: ``start`` it (returns once it answers at ``url``), ``serve`` until
    ``terminate`` (then drain for up to ``drain_s`` seconds, call ``on_drain(left)`` and return) or
    Ctrl-C (KeyboardInterrupt, or a return at once), ``stop`` what ``start`` started (also after a
    failed or interrupted start). ``terminate`` is called from the SIGTERM handler, in the main thread
    at any moment after ``start``, perhaps more than once: it only asks, and ``serve`` does the rest."""

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def serve(self, drain_s: float, on_drain: Callable[[int], None]) -> None: ...

    def terminate(self) -> None: ...

    def stop(self) -> None: ...


def engine_for(settings: ServeSettings) -> Engine:
    """The engine ``settings`` ask for (see the module docstring), not yet started."""
    if settings.runs_on_ray:
        from .ray_engine import RayEngine

        return RayEngine(settings)
    from .process_engine import ProcessEngine

    return ProcessEngine(settings)


class ServiceSigterm:
    """The service's SIGTERM handler: raises ``Stopped`` until ``serving(terminate)``, then calls
    ``terminate`` (the engine's drain)."""

    def __init__(self) -> None:
        self.terminate: Optional[Callable[[], None]] = None

    def serving(self, terminate: Callable[[], None]) -> None:
        """From now on SIGTERM drains: it calls ``terminate``."""
        self.terminate = terminate

    def __call__(self, signum: int, frame: Any) -> None:
        if self.terminate is None:
            raise Stopped("SIGTERM before the service answered")
        self.terminate()


def stop_before_serving_on_sigterm() -> Any:
    """From now until the service answers, SIGTERM raises ``Stopped`` in the main thread; the
    handler it replaced."""
    return signal.signal(signal.SIGTERM, ServiceSigterm())


@contextlib.contextmanager
def sigterm_kept() -> Iterator[None]:
    """The SIGTERM handler in place before the block, put back after it: for a block that installs its
    own (Ray's ``ray.init`` installs one that exits, ``sys.exit(15)``, which would skip the drain). A
    SIGTERM that handler turned into SystemExit(15) meanwhile goes to the handler kept, as it would
    have gone without the block."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except SystemExit as exit_:
        if exit_.code == signal.SIGTERM and callable(handler):
            handler(signal.SIGTERM, None)
        raise
    finally:
        signal.signal(signal.SIGTERM, handler)


def run(
    settings: ServeSettings,
    on_ready: Callable[[str], None],
    on_drain: Callable[[int], None],
    engine: Optional[Engine] = None,
) -> None:
    """Start the service, tell ``on_ready`` its URL, serve until a signal (see the module docstring;
    ``on_drain(left)`` after a drain, ``left`` the requests unanswered), and stop. Raises
    ``Stopped`` where SIGTERM came first, and a ValueError that says what to fix where the service
    cannot start (a port in use, GPUs missing)."""
    sigterm = ServiceSigterm()
    before = signal.signal(signal.SIGTERM, sigterm)
    running = engine if engine is not None else engine_for(settings)
    try:
        running.start()
        on_ready(running.url)
        sigterm.serving(running.terminate)
        running.serve(DRAIN_S, on_drain)
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
        signal.signal(signal.SIGTERM, before)
