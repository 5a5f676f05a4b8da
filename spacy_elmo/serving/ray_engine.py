"""The service on Ray Serve (``--engine ray``: more than one replica, or a cluster): Ray's HTTP proxy
in front, the gateway (``gateway.Gateway``) as the application's ingress, and the embedders
(``embedder.Embedder``), one per replica, each in a process of its own, on the CPU or one CUDA GPU
each, on this machine or anywhere in the cluster. A request crosses three processes (proxy,
gateway, replica); in return a replica that dies costs no request (the gateway sends it again).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Set, Tuple, Type

from ..extras import install_command
from .api_types import ReplicaAbout
from .embedder import Embedded, Embedder
from .gateway import Gateway
from .requests import EmbedRequest
from .settings import ServeSettings, check_gpus_here, check_gpus_of_cluster
from .sigterm import sigterm_kept

APP_NAME = "spacy-elmo"
MOST_ONGOING = 10_000  # requests a deployment takes at once: the gateway's limit, not Ray's, decides
PROXY_FLUSH_S = 0.2  # after a drain, for the last answers to leave Ray's proxy
STOP_WAIT_S = 10.0  # how long Ray's processes get to exit after ray.shutdown, before SIGKILL
KILL_WAIT_S = 5.0  # how long stop waits for them to end after SIGKILL
# What Ray prints of its own shutdown: its controller, killed on purpose, fails the tasks that
# waited on it ("(raylet) Task ServeController.listen_for_change failed ... killed by `ray.kill`").
SHUTDOWN_NOISE = "killed by `ray.kill`"
# Ray's driver installs a C++ handler that aborts the process (SIGABRT) on SIGTERM unless this is
# set when Ray is imported; the service handles SIGTERM itself (a drain).
NO_ABORT_ON_SIGTERM = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"

OnDrain = Callable[[int], None]


def replica_lost_errors() -> Tuple[Type[BaseException], ...]:
    """What awaiting a replica raises where it died or cannot be reached."""
    from ray.exceptions import RayActorError
    from ray.serve.exceptions import BackPressureError

    return (RayActorError, BackPressureError)


class RayReplicas:
    """The gateway's ``Replicas`` over a Ray Serve handle to the embedder deployment."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.lost = replica_lost_errors()

    async def embed(self, request: EmbedRequest) -> Embedded:
        return await self.handle.embed.remote(request)

    async def describe(self) -> ReplicaAbout:
        return await self.handle.describe.remote()


class RayGateway:
    """The application's ingress: a ``Gateway`` in front of the embedder deployment's handle."""

    def __init__(self, settings: ServeSettings, embedders: Any) -> None:
        self.gateway = Gateway(settings, RayReplicas(embedders))

    async def __call__(self, request: Any) -> Any:
        return await self.gateway(request)

    async def drained(self, seconds: float) -> int:
        return await self.gateway.drained(seconds)


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
    """The Ray Serve application: one gateway in front of ``settings.replicas`` embedders."""
    from ray import serve

    embedders = embedder_deployment(settings).bind(settings)
    gateway = serve.deployment(
        name="gateway", num_replicas=1, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=MOST_ONGOING
    )(RayGateway)
    return gateway.bind(settings, embedders)


class RayEngine:
    """The service on Ray Serve: ``start`` (Ray, or the cluster joined, and the application),
    ``serve`` (until a signal), ``stop``."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.started_ray = False
        self.ray: Any = None  # the module, once imported whole (SIGTERM may stop its import midway)
        self.processes_before: Set[Any] = set()  # the processes below this one before Ray started here
        self.terminated = threading.Event()  # the service's SIGTERM, once the application answers

    @property
    def url(self) -> str:
        """Where Ray's proxy answers."""
        return f"http://{self.settings.host}:{self.settings.port}"

    def start(self) -> None:
        """Start Ray here (or join ``settings.ray_address``) and the application; returns once it
        answers. A ValueError that says what to do where the GPUs asked for are not there: before
        Ray starts on this machine, once joined on a cluster."""
        settings = self.settings
        if settings.ray_address is None:
            check_gpus_here(settings)
        ray = self.ray = _import_ray()
        try:
            from ray import serve
        except ImportError as missing:  # Ray without the packages of Ray Serve (ray[serve])
            raise ValueError(f"Ray Serve cannot be imported ({missing}): {install_command('ray')}") from None

        if not ray.is_initialized():
            self.started_ray = True
            self.processes_before = descendants()
            _init_ray(ray, settings)
        logging.getLogger("ray.serve").setLevel(logging.WARNING)  # its start-up lines; `serve` prints its own
        check_gpus_of_cluster(ray, settings)
        serve.start(
            http_options={"host": settings.host, "port": settings.port}, logging_config={"log_level": "WARNING"}
        )
        serve.run(application(settings), name=APP_NAME, route_prefix="/", blocking=False)

    def serve(self, drain_s: float, on_drain: OnDrain) -> None:
        """Wait while the application serves: ``terminate`` drains it (up to ``drain_s`` seconds,
        then ``on_drain(left)``); Ctrl-C (KeyboardInterrupt) returns at once."""
        from ray import serve

        try:
            while not self.terminated.wait(0.5):  # a wait the signal handlers run in, every half second
                pass
        except KeyboardInterrupt:
            return
        left = serve.get_app_handle(APP_NAME).drained.remote(drain_s).result()
        time.sleep(PROXY_FLUSH_S)
        on_drain(left)

    def terminate(self) -> None:
        """Drain, then stop serving (the service's SIGTERM; see ``service.Engine``)."""
        self.terminated.set()

    def stop(self) -> None:
        """Stop the application, and Ray where it was started here, with every process it started:
        Ray's agents outlive a raylet stopped while they start, until they notice (a minute). Nothing
        where SIGTERM came before Ray was imported (a module imported halfway cannot be used)."""
        ray = self.ray
        if ray is None:
            return
        started = descendants() - self.processes_before if self.started_ray else set()
        with _without_lines(SHUTDOWN_NOISE):
            if self.started_ray:  # the application goes with the Ray it runs on: no graceful Serve stop to wait for
                ray.shutdown()
            elif ray.is_initialized():
                from ray import serve

                serve.shutdown()
        if self.started_ray:
            end_processes(started, STOP_WAIT_S)


@contextlib.contextmanager
def _without_lines(noise: str) -> Iterator[None]:
    """Print what is printed meanwhile (Ray's threads print to sys.stdout), but the lines that hold
    ``noise``."""
    caught = io.StringIO()
    with contextlib.redirect_stdout(caught):
        yield
    kept = [line for line in caught.getvalue().splitlines(keepends=True) if noise not in line]
    sys.stdout.write("".join(kept))


def descendants() -> Set[Any]:
    """The processes below this one, children's children included (``psutil.Process``es: one whose
    pid is reused later is another process)."""
    return set(_psutil().Process().children(recursive=True))


def end_processes(processes: Iterable[Any], seconds: float) -> None:
    """SIGTERM to those of ``processes`` still running, and SIGKILL to those still running ``seconds``
    later; returns once they have ended (SIGKILL's end is not instant), or ``KILL_WAIT_S`` after."""
    psutil = _psutil()
    alive = [process for process in processes if _running(process)]
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    alive = _still_running(alive, seconds)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    _still_running(alive, KILL_WAIT_S)


def _still_running(processes: List[Any], seconds: float) -> List[Any]:
    """Those of ``processes`` still running after up to ``seconds``. A zombie has ended: waiting
    reaps the ones that are this process's children, and the others are their parents' to reap."""
    deadline = time.monotonic() + seconds
    while processes and time.monotonic() < deadline:
        _, processes = _psutil().wait_procs(processes, timeout=0.1)
        processes = [process for process in processes if _running(process)]
    return processes


def _running(process: Any) -> bool:
    psutil = _psutil()
    try:
        return bool(process.is_running()) and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _psutil() -> Any:
    """psutil (the ray extra's; Ray carries a copy of its own too), imported on the Ray engine's path only."""
    import psutil  # type: ignore[import-untyped]  # no stubs installed: its calls here are few

    return psutil


def _import_ray() -> Any:
    """Ray, imported without its driver's abort on SIGTERM (the variable is read on import; Ray's
    own processes, started later, keep their handler)."""
    before = os.environ.get(NO_ABORT_ON_SIGTERM)
    os.environ[NO_ABORT_ON_SIGTERM] = "1"
    try:
        import ray
    finally:
        if before is None:
            del os.environ[NO_ABORT_ON_SIGTERM]
        else:
            os.environ[NO_ABORT_ON_SIGTERM] = before
    return ray


def _init_ray(ray: Any, settings: ServeSettings) -> None:
    """``ray.init`` here (or joining the cluster), with the service's SIGTERM handler kept: Ray's own
    (``sys.exit(15)``) would skip the drain (``sigterm.sigterm_kept``)."""
    with sigterm_kept():
        ray.init(
            address=settings.ray_address,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
