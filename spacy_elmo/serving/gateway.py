"""The service's front door: every HTTP request comes here first, and embedding requests go on to
the replicas that embed (``Replicas``: the pipeline in this process, or Ray Serve replicas).

    POST /embed            docs in, vectors out (``requests``, ``responses``)
    POST /v1/embeddings    OpenAI's embeddings API (``openai_api``)
    GET  /metadata         the pipeline, the biLM's sizes, precision and kernels, the service's settings
    GET  /metrics          Prometheus text (``metrics``)
    GET  /health           the service is up (open without a key)
    GET  /ready            a replica answers and the service is not draining (open without a key)
    GET  /openapi.json     the OpenAPI document of these routes (``openapi``; open without a key)
    GET  /docs             a page that shows it (open without a key)

``ROUTES`` (below the gateway) is where a request is routed: each path's method, handler, whether it
is open without the key, the form of its errors, and its typed request and answers (``api_types``),
which the OpenAPI document is written from once, at start; 404 and 405 are answered from it.

In order, an embedding request is: checked for the key (401), refused while draining (503) or
beyond ``max_concurrent_requests`` (429, both with ``Retry-After``), read and checked (4xx, see
``requests``), then embedded. A replica that dies under it costs it nothing: the request is sent
once more (embedding is idempotent), waiting up to ``RETRY_WAIT_S`` for a replica, and answered 503
with ``Retry-After`` only where none comes back in that time. Nothing a client sends is a 5xx.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import asdict, dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Protocol,
    Tuple,
    Type,
)

import msgspec
import orjson

from .api_types import (
    BatchingAbout,
    EmbedAnswer,
    ErrorAnswer,
    HealthAnswer,
    LimitsAbout,
    MetadataAnswer,
    OpenAIEmbeddingsAnswer,
    OpenAIErrorAnswer,
    ReadyAnswer,
    ReplicaAbout,
    embed_request_body,
    openai_request_body,
)
from .embedder import Embedded
from .metrics import CONTENT_TYPE, ServiceMetrics
from .openai_api import openai_error, parse_openai_request
from .openapi import docs_page, openapi_json
from .requests import BadRequest, EmbedRequest, ServeLimits, check_body_size, parse_request
from .settings import ServeSettings

if TYPE_CHECKING:  # for the checker; at run time starlette is imported where a request arrives
    from starlette.requests import Request
    from starlette.responses import Response

RETRY_WAIT_S = 30.0  # how long a request whose replica died waits for another
RETRY_AFTER_S = 1  # what 429 and 503 answers tell a client to wait
READY_WAIT_S = 2.0  # how long /ready waits for a replica to answer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErrorForm:
    """How a route writes its errors: ``body`` (status and message to the JSON body) and ``type``
    (the Struct of its shape, for the OpenAPI document)."""

    body: Callable[[int, str], Mapping[str, object]]
    type: Any

    def __call__(self, status: int, message: str) -> Mapping[str, object]:
        return self.body(status, message)


def _error(status: int, message: str) -> Mapping[str, object]:
    return {"error": message}


PLAIN_ERRORS = ErrorForm(_error, ErrorAnswer)
OPENAI_ERRORS = ErrorForm(openai_error, OpenAIErrorAnswer)


@dataclass(frozen=True)
class Route:
    """What answers a path (``ROUTES``, below the gateway): the ``method`` it takes, the ``handler``
    (a ``Gateway`` method: the request and ``error`` to the answer), whether it is ``open`` without
    the key, the form of its errors (``error``), and for the OpenAPI document: a ``summary``, the
    ``body`` it reads (the service's limits to its Struct type; None: no body), the ``answer``'s
    Struct type (None: any) of ``media_type``, the statuses ``answered`` in it, and the statuses of
    ``refusals`` in the error form (401 and 405 go without saying)."""

    method: str
    handler: Callable[["Gateway", Request, ErrorForm], Awaitable[Response]]
    open: bool = False
    error: ErrorForm = PLAIN_ERRORS
    summary: str = ""
    body: Optional[Callable[[ServeLimits], Any]] = None
    answer: Any = None
    media_type: str = "application/json"
    answered: Tuple[int, ...] = (200,)
    refusals: Tuple[int, ...] = ()


class ReplicaUnavailable(Exception):
    """No replica answered a request, after one retry."""


class Replicas(Protocol):
    """Where the gateway's embedding requests run: ``embed`` one request, ``describe`` the model
    (``embedder.Embedder.describe``); ``lost``: what both raise where the replica that took the call
    died or could not be reached (nothing, in this process)."""

    lost: Tuple[Type[BaseException], ...]

    async def embed(self, request: EmbedRequest) -> Embedded: ...

    async def describe(self) -> ReplicaAbout: ...


class Gateway:
    """The ingress (see the module docstring), in front of ``replicas``."""

    def __init__(self, settings: ServeSettings, replicas: Replicas) -> None:
        self.settings = settings
        self.replicas = replicas
        self.metrics = ServiceMetrics(settings.replicas)
        self.in_service = 0
        self.draining = False
        self._idle = asyncio.Event()  # set while no embedding request is in the service
        self._idle.set()
        self._width: Optional[int] = None  # the model's vector width, once a replica said it
        self.openapi = openapi_json(ROUTES, settings.limits)  # ROUTES as it is now: a test adds a route
        self.page = docs_page()

    async def __call__(self, request: Request) -> Response:
        """``request``: a Starlette request; the answer, a Starlette response."""
        started = time.perf_counter()
        path = request.url.path.rstrip("/") or "/"
        response = await self._route(request, path)
        route = path if path in ROUTES else "other"
        self.metrics.answered(route, response.status_code, time.perf_counter() - started)
        return response

    async def asgi(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        """The gateway as an ASGI application (for an ASGI server such as uvicorn): HTTP only."""
        from starlette.requests import Request

        if scope["type"] != "http":
            raise ValueError(f"the service speaks HTTP only, not {scope['type']!r}")
        response = await self(Request(scope, receive))
        await response(scope, receive, send)

    def drain(self) -> int:
        """Refuse new embedding requests with 503 from now on; the requests still in the service."""
        self.draining = True
        return self.in_service

    async def drained(self, seconds: float) -> int:
        """Drain (``drain``), then wait up to ``seconds`` for the requests in the service to be
        answered; how many were left unanswered."""
        self.drain()
        try:
            await asyncio.wait_for(self._idle.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        return self.in_service

    async def _route(self, request: Request, path: str) -> Response:
        """The answer of the route ``ROUTES`` has for ``path``: 404 where it has none, 401 without
        the key (but on open routes), 405 for another method."""
        route = ROUTES.get(path)
        if route is None:
            return json_response(PLAIN_ERRORS(404, f"no route {request.method} {path}: {ROUTE_LIST}"), 404)
        if not route.open and not self._authorized(request):
            message = "a valid API key is needed: send the header 'Authorization: Bearer KEY'"
            return json_response(route.error(401, message), 401, {"WWW-Authenticate": "Bearer"})
        if request.method != route.method:
            return json_response(route.error(405, f"{path} takes {route.method}: {ROUTE_LIST}"), 405)
        return await route.handler(self, request, route.error)

    async def _embed(self, request: Request, error: ErrorForm) -> Response:
        return await self._embedding(request, lambda body: parse_request(body, self.settings.limits), error)

    async def _openai_embeddings(self, request: Request, error: ErrorForm) -> Response:
        try:
            width = self._width or (await _within(self._about(), RETRY_WAIT_S)).elmo.width
        except self.replicas.lost + (asyncio.TimeoutError,) as lost:
            message = f"no replica could describe the model ({type(lost).__name__}): retry later"
            return json_response(error(503, message), 503, {"Retry-After": str(RETRY_AFTER_S)})
        return await self._embedding(
            request, lambda body: parse_openai_request(body, self.settings.limits, width), error
        )

    async def _metadata(self, request: Request, error: ErrorForm) -> Response:
        return json_response(msgspec.json.encode(await self._about()))

    async def _metrics(self, request: Request, error: ErrorForm) -> Response:
        return json_response(self.metrics.text(), media_type=CONTENT_TYPE)

    async def _health(self, request: Request, error: ErrorForm) -> Response:
        return json_response(msgspec.json.encode(HealthAnswer("ok")))

    async def _ready(self, request: Request, error: ErrorForm) -> Response:
        ready = not self.draining and await self._replica_answers()
        return json_response(msgspec.json.encode(ReadyAnswer(ready)), 200 if ready else 503)

    async def _openapi(self, request: Request, error: ErrorForm) -> Response:
        return json_response(self.openapi)

    async def _docs(self, request: Request, error: ErrorForm) -> Response:
        return json_response(self.page, media_type="text/html; charset=utf-8")

    async def _embedding(self, request: Request, parse: Callable[[bytes], EmbedRequest], error: ErrorForm) -> Response:
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        if self.draining:
            return json_response(error(503, "the service is shutting down: send the request elsewhere"), 503, retry)
        limit = self.settings.max_concurrent_requests
        if limit is not None and self.in_service >= limit:
            message = f"{self.in_service} requests in the service, the limit (--max-concurrent-requests): retry later"
            return json_response(error(429, message), 429, retry)
        self._admit(+1)
        try:
            try:
                parsed = parse(await self._body(request))
            except BadRequest as bad:
                return json_response(error(bad.status, bad.message), bad.status)
            try:
                embedded = await self._embedded(parsed)
            except ReplicaUnavailable as gone:
                return json_response(error(503, str(gone)), 503, retry)
            self.metrics.ran(embedded.replica, embedded.batch)
            return json_response(embedded.body)
        finally:
            self._admit(-1)

    def _admit(self, change: int) -> None:
        """Count a request into (+1) or out of (-1) the service."""
        self.in_service += change
        self.metrics.in_service.set(self.in_service)
        if self.in_service:
            self._idle.clear()
        else:
            self._idle.set()

    async def _body(self, request: Request) -> bytes:
        """The body, refused unread where its declared length is over the limit."""
        from starlette.requests import ClientDisconnect

        declared = request.headers.get("content-length", "")
        if declared.isdigit():
            check_body_size(int(declared), self.settings.limits)
        try:
            return await request.body()
        except ClientDisconnect:  # nobody reads the answer
            raise BadRequest(400, "the client went away before its body arrived") from None

    async def _embedded(self, request: EmbedRequest) -> Embedded:
        """The replicas' answer; sent once more where the first replica died under it."""
        lost = self.replicas.lost
        lost_or_late = lost + (asyncio.TimeoutError,)
        try:
            return await self.replicas.embed(request)
        except lost as first:
            self.metrics.replicas_lost.inc()
            logger.warning("spacy-elmo serve: a replica was lost under a request (%s); sending it again", first)
        try:
            return await _within(self.replicas.embed(request), RETRY_WAIT_S)
        except lost_or_late as second:  # the request is counted in replicas_lost already
            raise ReplicaUnavailable(
                f"no replica could embed the request (one was lost, and none answered within {RETRY_WAIT_S:.0f} s: "
                f"{type(second).__name__}): retry later"
            ) from None

    async def _about(self) -> MetadataAnswer:
        """``/metadata``: a replica's description and the service's settings."""
        described = await self.replicas.describe()
        self._width = described.elmo.width
        settings = self.settings
        return MetadataAnswer(
            **msgspec.structs.asdict(described),
            batching=BatchingAbout(settings.batching, settings.max_batch_tokens, settings.max_wait_ms),
            max_concurrent_requests=settings.max_concurrent_requests,
            api_key=settings.api_key is not None,
            limits=LimitsAbout(**asdict(settings.limits)),
        )

    async def _replica_answers(self) -> bool:
        try:
            await _within(self.replicas.describe(), READY_WAIT_S)
        except Exception:  # no replica, or none in time: not ready
            return False
        return True

    def _authorized(self, request: Request) -> bool:
        """Whether ``request`` carries the key (compared in constant time), or none is set."""
        key = self.settings.api_key
        if key is None:
            return True
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())


# Every route: where a request is routed, and what 404 and 405 answers list
ROUTES: Dict[str, Route] = {
    "/embed": Route(
        "POST",
        Gateway._embed,
        summary="Docs in (texts or words), each doc's, sentence's and token's vectors out",
        body=embed_request_body,
        answer=EmbedAnswer,
        refusals=(400, 413, 422, 429, 503),
    ),
    "/v1/embeddings": Route(
        "POST",
        Gateway._openai_embeddings,
        error=OPENAI_ERRORS,
        summary="OpenAI's embeddings API: each input's vector (the doc's)",
        body=openai_request_body,
        answer=OpenAIEmbeddingsAnswer,
        refusals=(400, 413, 422, 429, 503),
    ),
    "/metadata": Route(
        "GET", Gateway._metadata, summary="The pipeline, the biLM and the service's settings", answer=MetadataAnswer
    ),
    "/metrics": Route("GET", Gateway._metrics, summary="Prometheus's text format", media_type="text/plain"),
    "/health": Route("GET", Gateway._health, open=True, summary="The service answers", answer=HealthAnswer),
    "/ready": Route(
        "GET",
        Gateway._ready,
        open=True,
        summary="A replica answers and the service is not draining (503 otherwise)",
        answer=ReadyAnswer,
        answered=(200, 503),
    ),
    "/openapi.json": Route("GET", Gateway._openapi, open=True, summary="This document (OpenAPI 3.1)"),
    "/docs": Route("GET", Gateway._docs, open=True, summary="A page that shows this document", media_type="text/html"),
}


def _route_list() -> str:
    """``ROUTES`` in a line: "POST /embed, /v1/embeddings; GET /metadata, ..."."""
    paths: Dict[str, List[str]] = {}
    for path, route in ROUTES.items():
        paths.setdefault(route.method, []).append(path)
    return "; ".join(f"{method} {', '.join(each)}" for method, each in paths.items())


ROUTE_LIST = _route_list()


async def _within(answer: Awaitable[Any], seconds: float) -> Any:
    async def awaited() -> Any:
        return await answer

    return await asyncio.wait_for(awaited(), seconds)


def json_response(
    body: Any, status: int = 200, headers: Optional[Dict[str, str]] = None, media_type: str = "application/json"
) -> Response:
    """A Starlette response of ``body`` (bytes already written, or something orjson writes)."""
    from starlette.responses import Response

    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return Response(content=content, status_code=status, headers=headers, media_type=media_type)
