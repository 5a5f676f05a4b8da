"""``python -m spacy_elmo serve``: the pipeline behind HTTP on Ray Serve. Two deployments make the
application: the gateway (``gateway.Gateway``: routes, keys, limits, retries, metrics) and the
embedders (``embedder.Embedder``: the pipeline and its continuous batching), one per replica, on the
CPU or one CUDA GPU each, on one machine or a cluster. Ctrl-C stops at once; SIGTERM drains first:
requests in flight are answered, new ones refused with 503, then the service stops.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any, Dict, Optional

from .embedder import Embedder
from .gateway import Gateway
from .settings import ServeSettings, check_gpus_here, check_gpus_of_cluster

APP_NAME = "spacy-elmo"
MOST_ONGOING = 10_000  # requests a deployment takes at once: the gateway's limit, not Ray's, decides
DRAIN_S = 60.0  # how long SIGTERM waits for the requests in flight


def replica_options(settings: ServeSettings) -> Dict[str, Any]:
    """What Ray reserves for one embedder: no CPUs (its torch threads are ``settings.threads``; Ray's
    count would cap them), and with ``--device cuda`` one GPU (Ray sets the replica's
    CUDA_VISIBLE_DEVICES to it)."""
    options: Dict[str, Any] = {"num_cpus": 0}
    if settings.device == "cuda":
        options["num_gpus"] = 1
    return options


def embedder_deployment(settings: ServeSettings) -> Any:
    """The embedders: ``settings.replicas`` replicas of ``Embedder`` (made without Ray running)."""
    from ray import serve

    return serve.deployment(
        name="embedder",
        num_replicas=settings.replicas,
        ray_actor_options=replica_options(settings),
        max_ongoing_requests=MOST_ONGOING,
    )(Embedder)


def application(settings: ServeSettings) -> Any:
    """The Ray Serve application: one gateway in front of the embedders."""
    from ray import serve

    embedders = embedder_deployment(settings).bind(settings)
    gateway = serve.deployment(
        name="gateway", num_replicas=1, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=MOST_ONGOING
    )(Gateway)
    return gateway.bind(settings, embedders)


def start(settings: ServeSettings, address: Optional[str] = None) -> None:
    """Start Ray (or join ``address``) and the application; returns once it answers. A ValueError
    that says what to do where the GPUs asked for are not there: before Ray starts on this machine,
    once joined on a cluster (Ray, if started here, stopped again)."""
    import ray
    from ray import serve

    started_here = not ray.is_initialized()
    if started_here:
        if address is None:
            check_gpus_here(settings)
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    try:
        check_gpus_of_cluster(ray, settings)
    except ValueError:
        if started_here:
            ray.shutdown()
        raise
    serve.start(http_options={"host": settings.host, "port": settings.port}, logging_config={"log_level": "WARNING"})
    serve.run(application(settings), name=APP_NAME, route_prefix="/", blocking=False)


def stop() -> None:
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def drain(seconds: float = DRAIN_S) -> int:
    """Have the gateway refuse new embedding requests (503), then wait up to ``seconds`` for those in
    the service to be answered; how many were left unanswered."""
    from ray import serve

    gateway = serve.get_app_handle(APP_NAME)
    left = gateway.drain.remote().result()
    deadline = time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = gateway.requests_in_service.remote().result()
    time.sleep(0.2)  # the last answers leave the proxy
    return left


def serve_until_stopped(on_drain: Any = None) -> None:
    """Sleep while the started application serves. Ctrl-C stops it and Ray at once; SIGTERM drains
    it first (``drain``; ``on_drain(left)`` told how many requests were left unanswered)."""
    terminated = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: terminated.set())
    try:
        while not terminated.wait(0.5):
            pass
        left = drain()
        if on_drain is not None:
            on_drain(left)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop()
