"""``python -m spacy_elmo serve``: the pipeline behind HTTP. The engine is decided once, from the
settings (``ServeSettings.runs_on_ray``): one replica on this machine runs in this process
(``process_engine``: uvicorn, the gateway and the pipeline together); more replicas, or a cluster,
run on Ray Serve (``ray_engine``). Both put the same gateway (``gateway.Gateway``: routes, key,
limits, metrics, drain) in front of the same replica (``embedder.Embedder``: the pipeline and its
continuous batching).

Signals, from the moment ``run`` is called: SIGTERM before the service answers stops what was
started and returns (nothing was admitted: ``Stopped``); once it answers, SIGTERM drains (requests
in the service are answered, new ones refused with 503, for up to ``DRAIN_S`` seconds) and stops;
SIGINT (Ctrl-C) stops at once.
"""

from __future__ import annotations

import signal
from typing import Any, Callable, Optional, Protocol

from .settings import ServeSettings

DRAIN_S = 60.0  # how long SIGTERM waits for the requests in the service


class Stopped(Exception):
    """SIGTERM arrived before the service answered: it stopped without admitting a request."""


class Engine(Protocol):
    """What runs the service: ``start`` it (returns once it answers at ``url``), ``serve`` until a
    signal (SIGTERM: drain for up to ``drain_s`` seconds, then ``on_drain(left)``), ``stop`` what
    ``start`` started (also after a failed or interrupted start)."""

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def serve(self, drain_s: float, on_drain: Callable[[int], None]) -> None: ...

    def stop(self) -> None: ...


def engine_for(settings: ServeSettings) -> Engine:
    """The engine ``settings`` ask for (see the module docstring), not yet started."""
    if settings.runs_on_ray:
        from .ray_engine import RayEngine

        return RayEngine(settings)
    from .process_engine import ProcessEngine

    return ProcessEngine(settings)


def stop_before_serving_on_sigterm() -> Any:
    """From now until the service answers, SIGTERM raises ``Stopped`` in the main thread; the
    handler it replaced."""

    def stopped(signum: int, frame: Any) -> None:
        raise Stopped("SIGTERM before the service answered")

    return signal.signal(signal.SIGTERM, stopped)


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
    before = stop_before_serving_on_sigterm()
    running = engine if engine is not None else engine_for(settings)
    try:
        running.start()
        on_ready(running.url)
        running.serve(DRAIN_S, on_drain)
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
        signal.signal(signal.SIGTERM, before)
