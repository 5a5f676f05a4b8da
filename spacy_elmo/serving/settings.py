"""Everything ``serve`` decides, in one typed place (``ServeSettings``), and the checks that the
GPUs it asks for are there."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from ..extras import install_command
from .requests import ServeLimits

DEVICES = ("cpu", "cuda")
ENGINES = ("auto", "process", "ray")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
API_KEY_VARIABLE = "SPACY_ELMO_API_KEY"
# What the one-process engine imports beyond the core install: the serve extra (setup.py's SERVE)
SERVE_MODULES = ("uvicorn", "starlette", "orjson", "prometheus_client", "msgspec")


def machine_threads() -> int:
    """The default torch threads of a replica: this machine's CPU count."""
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class ServeSettings:
    """``source``: a spaCy pipeline directory or package with an ``elmo`` component, or biLM weights
    (a directory, a published model's name, a URL), read by blank(``lang``) + sentencizer + elmo.

    ``batching`` off runs each request alone; on, a replica that is free takes every request waiting
    (oldest first, up to ``max_batch_tokens``), waiting ``max_wait_ms`` for more only where that is
    above 0. ``max_concurrent_requests``: embedding requests in the service beyond which a request is
    answered 429 at once (None: no bound). ``api_key``: the bearer token every route but /health and
    /ready asks for (None: none). ``device``: "cpu", or "cuda" for one CUDA GPU per replica.

    ``engine``: "process" runs the HTTP server, the gateway and the one replica in this process
    (uvicorn); "ray" runs them on Ray Serve, each replica in a process of its own, on this machine or
    the cluster at ``ray_address``; "auto" (the default) is "process" for one replica here, "ray"
    for more replicas or a cluster. Read the choice from ``runs_on_ray``."""

    source: str
    lang: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 8000
    replicas: int = 1
    threads: int = field(default_factory=machine_threads)
    batching: bool = True
    max_batch_tokens: int = 4096
    max_wait_ms: float = 0.0
    max_concurrent_requests: Optional[int] = None
    api_key: Optional[str] = field(default=None, repr=False)
    precision: Optional[str] = None
    device: str = "cpu"
    engine: str = "auto"
    ray_address: Optional[str] = None
    limits: ServeLimits = ServeLimits()

    def __post_init__(self) -> None:
        for name in ("replicas", "threads", "max_batch_tokens"):
            _check_positive(name, getattr(self, name))
        if self.max_concurrent_requests is not None:
            _check_positive("max_concurrent_requests", self.max_concurrent_requests)
        if not 0 <= self.max_wait_ms <= 10000:
            raise ValueError(f"serve: max_wait_ms must be between 0 and 10000, got {self.max_wait_ms!r}.")
        if self.device not in DEVICES:
            raise ValueError(
                f"serve: device must be one of {DEVICES}, got {self.device!r}: --device cpu, or --device cuda "
                "for one NVIDIA GPU per replica."
            )
        if self.engine not in ENGINES:
            raise ValueError(f"serve: engine must be one of {ENGINES}, got {self.engine!r}.")
        if self.engine == "process" and (self.replicas > 1 or self.ray_address is not None):
            raise ValueError(
                f"serve: --engine process runs one replica in this process, and {self.replicas} replica(s)"
                f"{' on the cluster at ' + self.ray_address if self.ray_address else ''} were asked for: "
                "give --engine ray (or leave --engine out), or --replicas 1 without --ray-address."
            )
        lowest = 1 if self.runs_on_ray else 0  # 0: any free port, which Ray's proxy cannot report
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not lowest <= self.port <= 65535:
            raise ValueError(
                f"serve: port must be between {lowest} and 65535, got {self.port!r}"
                f"{' (0, any free port, needs --engine process)' if self.port == 0 else ''}."
            )
        if self.api_key is not None and (not self.api_key or not self.api_key.isascii() or " " in self.api_key):
            raise ValueError(
                "serve: the API key must be non-empty printable ASCII without spaces (it travels in an "
                f"Authorization header): give another --api-key or {API_KEY_VARIABLE}."
            )

    @property
    def runs_on_ray(self) -> bool:
        """Whether the service runs on Ray Serve (see ``engine``)."""
        if self.engine == "auto":
            return self.replicas > 1 or self.ray_address is not None
        return self.engine == "ray"

    @property
    def ray_options(self) -> str:
        """The options that put the service on Ray Serve, as given on the command line ("" where
        none does)."""
        given = [f"--replicas {self.replicas}"] if self.replicas > 1 else []
        given += [f"--ray-address {self.ray_address}"] if self.ray_address is not None else []
        given += ["--engine ray"] if self.engine == "ray" else []
        return " ".join(given) if self.runs_on_ray else ""

    @property
    def local_host(self) -> bool:
        """Whether the service listens on this machine's loopback interface only."""
        return self.host in LOOPBACK_HOSTS

    @property
    def gpu_id(self) -> int:
        """The GPU a replica runs on: 0, the first it sees, which is the one Ray gives it (Ray sets its
        CUDA_VISIBLE_DEVICES); -1 for the CPU."""
        return 0 if self.device == "cuda" else -1


def _check_positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"serve: {name} must be a positive integer, got {value!r}.")


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
            f"run on a machine with NVIDIA GPUs and a torch built with CUDA ({install_command('cuda12x')})",
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
