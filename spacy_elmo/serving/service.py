"""``python -m spacy_elmo serve``: the pipeline behind HTTP. The engine is decided once, from the
settings (``ServeSettings.runs_on_ray``): one replica on this machine runs in this process
(``process_engine``: uvicorn, the gateway and the pipeline together); more replicas, or a cluster,
run on Ray Serve (``ray_engine``). Both put the same gateway (``gateway.Gateway``: routes, key,
limits, metrics, drain) in front of the same replica (``embedder.Embedder``: the pipeline and its
continuous batching).

Signals, from the moment ``run`` is called: SIGTERM before the service answers stops what was
started and returns (nothing was admitted: ``Stopped``); once it answers, SIGTERM drains (requests
in the service are answered, new ones refused with 503, for up to ``DRAIN_S`` seconds) and stops;
SIGINT (Ctrl-C) stops at once. SIGTERM is handled in one place for both engines (``sigterm``):
an engine says what a drain is (``Engine.terminate``) and keeps the handler across what would
replace it (``sigterm.sigterm_kept``, around Ray's start).
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from .settings import ServeSettings
from .sigterm import Stopped, service_sigterm

__all__ = ["DRAIN_S", "Engine", "Stopped", "engine_for", "run"]

DRAIN_S = 60.0  # how long SIGTERM waits for the requests in the service


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
    with service_sigterm() as sigterm:
        running = engine if engine is not None else engine_for(settings)
        try:
            running.start()
            sigterm.serving(running.terminate)  # before it says it is ready: a SIGTERM after that drains
            on_ready(running.url)
            running.serve(DRAIN_S, on_drain)
        except KeyboardInterrupt:
            pass
        finally:
            running.stop()
