"""``python -m spacy_elmo serve``: the pipeline behind HTTP on Ray Serve, which gathers concurrent
requests into one ``nlp.pipe`` batch (up to ``max_batch_tokens`` or ``max_wait_ms``) and scales to
replicas on a cluster. Routes:

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


def machine_threads() -> int:
    """The default torch threads of a replica: this machine's CPU count."""
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``serve`` decides, in one place. ``source``: a spaCy pipeline directory or package
    with an ``elmo`` component, or biLM weights (a directory, a published model's name, a URL), read by
    blank(``lang``) + sentencizer + elmo. ``batching`` off runs each request alone."""

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
    limits: ServeLimits = ServeLimits()

    def __post_init__(self) -> None:
        for name in ("port", "replicas", "threads", "max_batch_tokens"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"serve: {name} must be a positive integer, got {getattr(self, name)!r}.")
        if not 0 <= self.max_wait_ms <= 10000:
            raise ValueError(f"serve: max_wait_ms must be between 0 and 10000, got {self.max_wait_ms!r}.")


def load_served_pipeline(settings: ServeSettings) -> Any:
    """The pipeline ``settings.source`` names, its elmo components set to keep every layer (as
    ``embed`` loads it: ``corpus.worker.load_pipeline``)."""
    from ..corpus.settings import EmbedSettings
    from ..corpus.worker import load_pipeline

    if _is_pipeline(settings.source):
        return load_pipeline(EmbedSettings(pipeline=settings.source, precision=settings.precision))
    return load_pipeline(EmbedSettings(weights=settings.source, lang=settings.lang, precision=settings.precision))


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
    plan = bilm.kernel_plan
    return {
        "pipeline": {"name": nlp.meta.get("name"), "version": nlp.meta.get("version"), "lang": nlp.lang},
        "components": nlp.pipe_names,
        "elmo": {
            "layers": bilm.config.n_output_layers,
            "width": bilm.config.output_dim,
            "precision": bilm.precision,
            "kernel": None if plan is None else plan.choice.kernel,
            "speed_x_fp32": None if plan is None else list(plan.speedup),  # one sentence, batch
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


def application(settings: ServeSettings) -> Any:
    """The Ray Serve application: ``settings.replicas`` replicas of ``ElmoService``."""
    from ray import serve

    replica = serve.deployment(
        name="elmo",
        num_replicas=settings.replicas,
        ray_actor_options={"num_cpus": 0},  # its torch threads are ``settings.threads``; Ray's count would cap them
        max_ongoing_requests=1000,
    )(ElmoService)
    return replica.bind(settings)


def start(settings: ServeSettings, address: Optional[str] = None) -> None:
    """Start Ray (or join ``address``) and the application; returns once it answers."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    serve.start(http_options={"host": settings.host, "port": settings.port}, logging_config={"log_level": "WARNING"})
    serve.run(application(settings), name=APP_NAME, route_prefix="/", blocking=False)


def stop() -> None:
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def serve_forever(settings: ServeSettings, address: Optional[str] = None) -> None:
    start(settings, address)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
