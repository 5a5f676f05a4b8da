"""``python -m spacy_elmo serve``: the pipeline behind HTTP on Ray Serve, which gathers concurrent
requests into one ``nlp.pipe`` batch (up to ``max_batch_tokens`` or ``max_wait_ms``) and scales to
replicas on a cluster, on the CPU or one CUDA GPU per replica. Routes:

    POST /embed      docs in, vectors out (``requests``, ``responses``)
    GET  /metadata   the pipeline's name and version, the biLM's sizes, the precision and kernels that run
    GET  /health     the service is up;  GET /ready: a replica has its pipeline loaded

Bad input is a 4xx with a message (``requests.BadRequest``); the service keeps serving.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Dict, List, Optional

import orjson

from .requests import BadRequest, EmbedRequest, ServeLimits, check_body_size, parse_request
from .responses import embed_requests

APP_NAME = "spacy-elmo"
DEVICES = ("cpu", "cuda")


def machine_threads() -> int:
    """The default torch threads of a replica: this machine's CPU count."""
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``serve`` decides, in one place. ``source``: a spaCy pipeline directory or package
    with an ``elmo`` component, or biLM weights (a directory, a published model's name, a URL), read by
    blank(``lang``) + sentencizer + elmo. ``batching`` off runs each request alone. ``device``: "cpu",
    or "cuda" for one CUDA GPU per replica (Ray gives each replica its own)."""

    source: str
    lang: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 8000
    replicas: int = 1
    threads: int = field(default_factory=machine_threads)
    batching: bool = True
    max_batch_tokens: int = 4096
    max_wait_ms: float = 10.0
    precision: Optional[str] = None
    device: str = "cpu"
    limits: ServeLimits = ServeLimits()

    def __post_init__(self) -> None:
        for name in ("port", "replicas", "threads", "max_batch_tokens"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"serve: {name} must be a positive integer, got {getattr(self, name)!r}.")
        if not 0 <= self.max_wait_ms <= 10000:
            raise ValueError(f"serve: max_wait_ms must be between 0 and 10000, got {self.max_wait_ms!r}.")
        if self.device not in DEVICES:
            raise ValueError(
                f"serve: device must be one of {DEVICES}, got {self.device!r}: --device cpu, or --device cuda "
                "for one NVIDIA GPU per replica."
            )

    @property
    def gpu_id(self) -> int:
        """The GPU a replica runs on: 0, the first it sees, which is the one Ray gives it (Ray sets its
        CUDA_VISIBLE_DEVICES); -1 for the CPU."""
        return 0 if self.device == "cuda" else -1


def check_gpus_here(settings: ServeSettings) -> None:
    """Raise a ValueError that says what to do where ``settings`` ask for more CUDA GPUs (one per
    replica) than torch sees on this machine; nothing for the CPU."""
    if settings.device != "cuda":
        return
    import torch

    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    if count < settings.replicas:
        raise _too_few_gpus(
            settings,
            count,
            f"torch {torch.__version__} sees {count} on this machine (torch.cuda.is_available() is {available})",
            'run on a machine with NVIDIA GPUs and a torch built with CUDA (pip install "spacy-elmo[cuda12x]")',
        )


def check_gpus_of_cluster(ray: Any, settings: ServeSettings) -> None:
    """Raise a ValueError where the Ray cluster joined has fewer GPUs than ``settings`` ask for (one
    per replica with ``--device cuda``): Ray would wait for them for ever."""
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if settings.device == "cuda" and gpus < settings.replicas:
        raise _too_few_gpus(settings, gpus, f"the Ray cluster has {gpus}", "add GPU nodes to the cluster")


def _too_few_gpus(settings: ServeSettings, count: int, found: str, remedy: str) -> ValueError:
    fewer = f"give --replicas {count}, " if count else ""
    return ValueError(
        f"--device cuda --replicas {settings.replicas} needs {settings.replicas} CUDA GPU(s), one per replica, and "
        f"{found}. {remedy[0].upper()}{remedy[1:]}, {fewer}or serve on the CPU: --device cpu."
    )


def load_served_pipeline(settings: ServeSettings) -> Any:
    """The pipeline ``settings.source`` names, its elmo components set to keep every layer, on
    ``settings.device`` (as ``embed`` loads it: ``corpus.worker.load_pipeline``). On a GPU, thinc's
    cupy arrays take their memory from torch's allocator (as ``spacy train`` sets it), so the biLM's
    tensors and spaCy's arrays share one pool."""
    from ..corpus.settings import EmbedSettings
    from ..corpus.worker import load_pipeline

    if _is_pipeline(settings.source):
        embed = EmbedSettings(pipeline=settings.source, precision=settings.precision)
    else:
        embed = EmbedSettings(weights=settings.source, lang=settings.lang, precision=settings.precision)
    return load_pipeline(embed, settings.gpu_id, allocator="pytorch")


def _is_pipeline(source: str) -> bool:
    """A spaCy pipeline directory, or the name of an installed package that is not a published
    model's; anything else (a biLM directory, a published name, a URL) is weights."""
    from ..hub.cache import is_url
    from ..hub.catalogue import CATALOGUE

    path = Path(source).expanduser()
    if path.exists():
        return (path / "config.cfg").is_file()
    return source not in CATALOGUE and not is_url(source) and "/" not in source


def metadata(nlp: Any, settings: ServeSettings) -> Dict[str, Any]:
    from ..pipeline.component import Elmo

    elmo = next(pipe for _, pipe in nlp.pipeline if isinstance(pipe, Elmo))
    bilm = elmo.bilm
    kernels = bilm.kernels
    return {
        "pipeline": {"name": nlp.meta.get("name"), "version": nlp.meta.get("version"), "lang": nlp.lang},
        "components": nlp.pipe_names,
        "elmo": {
            "layers": bilm.config.n_output_layers,
            "width": bilm.config.output_dim,
            "precision": bilm.precision,
            "device": str(bilm.device),
            "kernel": None if kernels is None else kernels.choice.kernel,
            "kernels": None if kernels is None else kernels.description(),
        },
        "spacy_elmo": version("spacy-elmo"),
        "batching": {
            "on": settings.batching,
            "max_batch_tokens": settings.max_batch_tokens,
            "max_wait_ms": settings.max_wait_ms,
        },
        "limits": asdict(settings.limits),
    }


class ElmoService:
    """One replica: the pipeline loaded once, requests routed, concurrent ones batched by tokens."""

    def __init__(self, settings: ServeSettings) -> None:
        import torch
        from ray import serve

        torch.set_num_threads(settings.threads)
        self.settings = settings
        self.nlp = load_served_pipeline(settings)
        self.about = metadata(self.nlp, settings)
        cap = settings.max_batch_tokens  # a request larger than a batch makes a batch of its own
        self.embed_batch = serve.batch(
            max_batch_size=cap,
            batch_wait_timeout_s=settings.max_wait_ms / 1000,
            batch_size_fn=lambda requests: sum(min(request.size, cap) for request in requests),
        )(self._embed_batch)

    async def _embed_batch(self, requests: List[EmbedRequest]) -> List[bytes]:
        return embed_requests(self.nlp, requests)

    async def __call__(self, request: Any) -> Any:
        """``request``: a Starlette request; the answer, a Starlette response."""
        path = request.url.path.rstrip("/") or "/"
        if (request.method, path) == ("POST", "/embed"):
            return await self._embed(request)
        answers = {"/health": {"status": "ok"}, "/ready": {"ready": True}, "/metadata": self.about}
        if request.method == "GET" and path in answers:
            return json_response(answers[path])
        status = 405 if path in (*answers, "/embed") else 404
        routes = "POST /embed; GET /metadata, /health, /ready"
        return json_response({"error": f"no route {request.method} {path}: {routes}"}, status)

    async def _embed(self, request: Any) -> Any:
        try:
            parsed = parse_request(await self._body(request), self.settings.limits)
        except BadRequest as bad:
            return json_response({"error": bad.message}, bad.status)
        if self.settings.batching:
            return json_response(await self.embed_batch(parsed))
        return json_response(embed_requests(self.nlp, [parsed])[0])

    async def _body(self, request: Any) -> bytes:
        """The body, refused unread where its declared length is over the limit."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit():
            check_body_size(int(declared), self.settings.limits)
        return await request.body()


def json_response(body: Any, status: int = 200) -> Any:
    """A Starlette response of ``body`` (bytes already JSON, or something orjson writes)."""
    from starlette.responses import Response

    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return Response(content=content, status_code=status, media_type="application/json")


def replica_options(settings: ServeSettings) -> Dict[str, Any]:
    """What Ray reserves for one replica: no CPUs (its torch threads are ``settings.threads``; Ray's
    count would cap them), and with ``--device cuda`` one GPU (Ray sets the replica's
    CUDA_VISIBLE_DEVICES to it)."""
    options: Dict[str, Any] = {"num_cpus": 0}
    if settings.device == "cuda":
        options["num_gpus"] = 1
    return options


def deployment(settings: ServeSettings) -> Any:
    """The Ray Serve deployment: ``settings.replicas`` replicas of ``ElmoService`` (made without Ray
    running)."""
    from ray import serve

    return serve.deployment(
        name="elmo",
        num_replicas=settings.replicas,
        ray_actor_options=replica_options(settings),
        max_ongoing_requests=1000,
    )(ElmoService)


def application(settings: ServeSettings) -> Any:
    """The Ray Serve application: the deployment bound to ``settings``."""
    return deployment(settings).bind(settings)


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


def serve_forever(settings: ServeSettings, address: Optional[str] = None) -> None:
    """``start``, then serve until Ctrl-C (``serve_until_interrupted``)."""
    start(settings, address)
    serve_until_interrupted()


def serve_until_interrupted() -> None:
    """Sleep while the started application serves; on Ctrl-C, stop it and Ray."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
