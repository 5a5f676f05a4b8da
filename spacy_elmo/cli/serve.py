"""``python -m spacy_elmo serve``: a pipeline, or biLM weights, behind HTTP (``serving.service``)."""

from __future__ import annotations

from typing import Any

import typer
from wasabi import msg

from ..serving.settings import API_KEY_VARIABLE
from .app import MODEL_ERRORS, app
from .failure import fail
from .languages import language_parameter

REPLICAS = typer.Option(1, help="Copies of the pipeline; above 1, each in its own process on Ray Serve (ray extra).")
RAY_ADDRESS = typer.Option(None, help="A Ray cluster to join (on Ray Serve, the ray extra; default: this machine).")
MAX_WAIT_MS = typer.Option(
    0.0, help="How long a free replica waits for more requests before a batch under --max-batch-tokens (0: none)."
)
MAX_CONCURRENT_REQUESTS = typer.Option(
    0, help="Embedding requests in the service beyond which a request gets 429 at once (0: no limit)."
)
ENGINE = typer.Option(
    "auto",
    help="process: the server and one replica in this process; ray: Ray Serve, each replica in its own process "
    "(auto: process for one replica here, ray for --replicas above 1 or --ray-address).",
)
API_KEY = typer.Option(
    None,
    envvar=API_KEY_VARIABLE,
    show_envvar=True,
    help="A key every route but /health and /ready asks for, as 'Authorization: Bearer KEY'.",
)


@app.command()
def serve(
    source: str = typer.Argument(
        ...,
        help="A spaCy pipeline with an elmo component (directory or package), or biLM weights: a directory, a "
        "published model's name or a URL (read by blank(--lang) + sentencizer + elmo).",
    ),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="Port to listen on (0: any free port, printed once listening)."),
    lang: str = typer.Option(
        None, callback=language_parameter, help="Language of the blank pipeline around weights (default: the model's)."
    ),
    replicas: int = REPLICAS,
    threads: int = typer.Option(0, help="Torch threads per replica (0: the machine's CPU count)."),
    max_batch_tokens: int = typer.Option(4096, help="A free replica takes the requests waiting, up to so many tokens."),
    max_wait_ms: float = MAX_WAIT_MS,
    batching: bool = typer.Option(True, help="--no-batching runs each request alone."),
    max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
    api_key: str = API_KEY,
    precision: str = typer.Option(None, help="fp32, bf16 or int8 (default: the pipeline's)."),
    ray_address: str = RAY_ADDRESS,
    device: str = typer.Option("cpu", help="cpu, or cuda: each replica on a CUDA GPU of its own."),
    engine: str = ENGINE,
) -> None:
    """Serve ELMo over HTTP with continuous batching: POST /embed (JSON texts or words in; vectors
    out), POST /v1/embeddings (OpenAI's API), GET /metadata, /metrics, /health, /ready. Each request
    gets exactly what the pipeline gives it alone. Ctrl-C stops; SIGTERM answers the requests in
    flight first.

    curl -s localhost:8000/embed -d '{"texts": ["The cat sat."]}'"""
    from ..serving.sigterm import Stopped, stop_before_serving_on_sigterm

    stop_before_serving_on_sigterm()
    try:
        _serve(
            source=source,
            lang=lang,
            host=host,
            port=port,
            replicas=replicas,
            threads=threads,
            batching=batching,
            max_batch_tokens=max_batch_tokens,
            max_wait_ms=max_wait_ms,
            max_concurrent_requests=max_concurrent_requests or None,
            api_key=api_key,
            precision=precision,
            device=device,
            engine=engine,
            ray_address=ray_address,
        )
    except Stopped:
        msg.good("Stopped before serving (SIGTERM): no request was admitted")


def _serve(**options: Any) -> None:
    settings = _checked_settings(**options)
    from ..serving.gateway import ROUTE_LIST
    from ..serving.service import run

    where = "a CUDA GPU per replica" if settings.device == "cuda" else "the CPU"
    how = "on Ray Serve" if settings.runs_on_ray else "in this process"
    msg.info(f"Serving {settings.source} on {where}, {how} ({ROUTE_LIST})")
    if not settings.local_host and settings.api_key is None:
        msg.warn(
            f"Listening on {settings.host} without an API key: whoever reaches this port can use the service",
            f"Set one: --api-key KEY, or {API_KEY_VARIABLE}=KEY (clients send 'Authorization: Bearer KEY'); or "
            "listen on this machine alone: --host 127.0.0.1",
        )
    if settings.runs_on_ray and settings.ray_address is None and settings.local_host:
        msg.info(
            f"Ray's own processes listen on every interface of this machine, not only {settings.host} (Ray has no "
            "setting to keep them on loopback): keep their ports behind a firewall, or serve one replica in one "
            "process (--engine process)"
        )
    try:
        run(settings, on_ready=_ready, on_drain=_drained)
    except (*MODEL_ERRORS, ValueError) as err:
        # weights that cannot be fetched or read (what to do, as `download` says it), a port in use, a
        # cluster without the GPUs asked for, Ray without Ray Serve's packages
        fail("Cannot serve", err)


def _ready(url: str) -> None:
    msg.info(f"Listening on {url}: Ctrl-C stops; SIGTERM answers the requests in flight, then stops")


def _drained(left: int) -> None:
    if left:
        msg.warn(f"Drained: {left} request(s) still unanswered after the wait; stopping")
    else:
        msg.good("Drained: every request in flight was answered; stopping")


def _checked_settings(**options: Any) -> Any:
    """The ``ServeSettings`` of the command's ``options``, checked before anything starts (every value
    in range, the extra the engine needs installed, the GPUs of ``--device cuda`` on this machine
    unless a cluster is joined); a message that says what to fix, and exit 1, otherwise."""
    try:
        from ..kernels.precision import check_precision
        from ..serving.settings import ServeSettings, check_gpus_here, machine_threads

        options["precision"] = options["precision"] and check_precision(options["precision"])
        options["threads"] = options["threads"] or machine_threads()
        settings = ServeSettings(**options)
        _check_extras(settings)
        if settings.ray_address is None:
            check_gpus_here(settings)  # a cluster's GPUs are counted once joined (serving.ray_engine)
    except ValueError as err:
        fail("Bad setting", err)
    return settings


def _check_extras(settings: Any) -> None:
    """Exit 1 with the extra to install where a package the engine needs is missing: the serve extra
    for every engine, the ray extra for Ray Serve. Packages are looked for, not imported: Ray is
    imported by its engine alone, in its own way (``serving.ray_engine``)."""
    from importlib.util import find_spec

    from ..extras import install_command
    from ..serving.settings import SERVE_MODULES

    missing = [name for name in SERVE_MODULES if find_spec(name) is None]
    if missing:
        fail(f"serve needs the serve extra: {', '.join(missing)} not installed", fix=install_command("serve"))
    if settings.runs_on_ray and find_spec("ray") is None:
        fail(
            f"{settings.ray_options} runs on Ray Serve, and Ray is not installed",
            fix=f"{install_command('ray')}; or serve one replica in this process: leave out --replicas, "
            "--ray-address and --engine ray",
        )
