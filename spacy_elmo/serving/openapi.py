"""The service's OpenAPI 3.1 document (``GET /openapi.json``), written once at start from the
gateway's route table and the typed requests and answers of ``api_types``, and the page that reads
it (``GET /docs``: ``docs_page.html``, one file with its own script and style, nothing fetched from
elsewhere, so it works offline).

Each route is an operation: its request body (for the service's limits), its answers by status
(the 2xx, then the 4xx and 503 in the route's error form, each with its headers) and whether it
asks for the key (``security``; ``[]`` where it is open). A path no route has is answered 404 in
the plain error form (``components.responses.NotFound``).
"""

from __future__ import annotations

from importlib import resources
from importlib.metadata import version
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

import msgspec
import orjson

from .api_types import ErrorAnswer
from .requests import ServeLimits

TITLE = "spacy-elmo serve"
KEY_SCHEME = "apiKey"
# What each status means, on whatever route answers it
MEANINGS = {
    200: "the answer",
    400: "the body is empty, not UTF-8 or not JSON (or a client gone before its body arrived)",
    401: "the service asks for a key (--api-key) and the request has none, or another",
    404: "no route has this path",
    405: "the route takes another method",
    413: "the request is over a limit (body size, docs, characters, words): the message names it",
    422: "the JSON is not of the route's shape: the message says which field and how to fix it",
    429: "--max-concurrent-requests requests are in the service already: retry after Retry-After",
    503: "the service is draining (after SIGTERM) or no replica answered: retry after Retry-After",
}
HEADERS = {
    401: {"WWW-Authenticate": "Bearer: send the key as 'Authorization: Bearer KEY'"},
    429: {"Retry-After": "seconds to wait before a retry"},
    503: {"Retry-After": "seconds to wait before a retry"},
}


class Described(Protocol):
    """What the document reads of a route (``gateway.Route``)."""

    @property
    def method(self) -> str: ...
    @property
    def handler(self) -> Callable[..., Any]: ...
    @property
    def open(self) -> bool: ...
    @property
    def error(self) -> Any: ...  # its ``type``: the Struct of the route's error bodies
    @property
    def summary(self) -> str: ...
    @property
    def body(self) -> Optional[Callable[[ServeLimits], Any]]: ...
    @property
    def answer(self) -> Any: ...
    @property
    def media_type(self) -> str: ...
    @property
    def answered(self) -> Tuple[int, ...]: ...
    @property
    def refusals(self) -> Tuple[int, ...]: ...


def openapi_document(routes: Mapping[str, Described], limits: ServeLimits) -> Dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (path to route) for a service with ``limits``."""
    bodies = {path: route.body(limits) for path, route in routes.items() if route.body is not None}
    types: List[Any] = [ErrorAnswer, *bodies.values()]
    for route in routes.values():
        types.extend(each for each in (route.answer, route.error.type) if each is not None)
    refs, schemas = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    ref_of = dict(zip(map(id, types), refs, strict=True))
    paths = {}
    for path, route in routes.items():
        body = ref_of[id(bodies[path])] if path in bodies else None
        paths[path] = {route.method.lower(): _operation(route, ref_of, body)}
    return {
        "openapi": "3.1.0",
        "info": {"title": TITLE, "version": version("spacy-elmo"), "description": _about(routes)},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {"NotFound": _answer(404, ref_of[id(ErrorAnswer)], "application/json", {})},
            "securitySchemes": {
                KEY_SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the key the service was started with (--api-key or SPACY_ELMO_API_KEY), "
                    "sent as 'Authorization: Bearer KEY'; asked for only where one was set",
                }
            },
        },
    }


def openapi_json(routes: Mapping[str, Described], limits: ServeLimits) -> bytes:
    """``openapi_document`` as the bytes ``GET /openapi.json`` answers."""
    return orjson.dumps(openapi_document(routes, limits))


def docs_page() -> bytes:
    """The HTML page ``GET /docs`` answers: it reads ``openapi.json`` beside it and shows it."""
    return resources.files(__name__.rpartition(".")[0]).joinpath("docs_page.html").read_bytes()


def _operation(route: Described, ref_of: Dict[int, Any], body: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """One route's operation: summary, key, request ``body`` (its schema, or None) and answers by
    status; ``ref_of``: each type's schema by its ``id``."""
    if route.answer is not None:
        answer = ref_of[id(route.answer)]
    else:  # untyped: any JSON, or text
        answer = {} if route.media_type == "application/json" else {"type": "string"}
    responses = {str(status): _answer(status, answer, route.media_type, {}) for status in route.answered}
    refusals = sorted({*route.refusals, 405} | (set() if route.open else {401}))
    error = ref_of[id(route.error.type)]
    responses.update({str(status): _answer(status, error, "application/json", HEADERS) for status in refusals})
    operation: Dict[str, Any] = {
        "operationId": route.handler.__name__.strip("_"),
        "summary": route.summary,
        "security": [] if route.open else [{KEY_SCHEME: []}],
        "responses": responses,
    }
    if body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return operation


def _answer(status: int, schema: Any, media_type: str, headers: Mapping[int, Mapping[str, str]]) -> Dict[str, Any]:
    """One status's answer: what it means, its body's schema and the headers it always carries."""
    answer: Dict[str, Any] = {"description": MEANINGS.get(status, "the answer")}
    answer["content"] = {media_type: {"schema": schema}}
    named = headers.get(status, {})
    if named:
        string = {"type": "string"}
        answer["headers"] = {
            name: {"required": True, "description": said, "schema": string} for name, said in named.items()
        }
    return answer


def _about(routes: Mapping[str, Described]) -> str:
    """The document's description: the routes and what they share."""
    guarded = [path for path, route in routes.items() if not route.open]
    return (
        "ELMo vectors over HTTP (spacy-elmo). Where the service was started with a key, "
        f"{', '.join(guarded)} ask for it ('Authorization: Bearer KEY'; 401 without); the other routes are open. "
        "Nothing a client sends is answered 5xx: a bad request gets a 4xx whose message says what to fix."
    )
