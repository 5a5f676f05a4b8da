"""Every answer the suite gets from ``serve`` is checked against the service's OpenAPI document
(``GET /openapi.json``, ``spacy_elmo.serving.openapi``): a pytest plugin (conftest.py's
``pytest_plugins``) that, while a test of a serve file runs (its module fixtures too), checks each
answer httpx hands back, whichever client asked (the tests' own, a server's readiness probe,
OpenAI's client, which speaks through httpx).

An answer must have a status its route documents (a path no route has: 404), its documented media
type and required headers, and a JSON body its schema holds. The document is made from the route
table as it is when the answer comes, so a route a test adds is in it. Answers httpx did not read
(streamed) are left alone; answers of HTTP itself gone wrong (tests/test_serve.py's raw sockets)
come from uvicorn, not a route, and are not httpx's.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Dict, Iterator, List, Optional

import httpx
import pytest

SERVE_FILES = ("test_serve", "test_served")  # the files whose tests speak to the service


def answer_problems(document: Dict[str, Any], response: httpx.Response) -> List[str]:
    """What in ``response`` the OpenAPI ``document`` does not allow (none: it is as documented)."""
    path = response.request.url.path.rstrip("/") or "/"
    operations = document["paths"].get(path)
    status = response.status_code
    if operations is None:
        answer = document["components"]["responses"]["NotFound"] if status == 404 else None
    else:
        operation = operations.get(response.request.method.lower())
        if operation is None:  # asked with another method: the key is checked first, then the method
            operation = next(iter(operations.values())) if status in (401, 405) else {"responses": {}}
        answer = operation["responses"].get(str(status))
    where = f"{response.request.method} {path} answered {status}"
    if answer is None:
        return [f"{where}: the document has no such answer"]
    (media, content), *_ = answer["content"].items()
    problems = [
        f"{where} without its header {name}"
        for name, header in answer.get("headers", {}).items()
        if header.get("required") and name not in response.headers
    ]
    if response.headers.get("content-type", "").split(";")[0] != media:
        problems.append(f"{where} as {response.headers.get('content-type')!r}, documented {media!r}")
    elif media == "application/json":
        body = json.loads(response.content)
        problems.extend(f"{where}: {error.message} at {error.json_path}" for error in _errors(document, content, body))
    return problems


def _errors(document: Dict[str, Any], content: Dict[str, Any], body: Any) -> List[Any]:
    return list(_validator(document, content).iter_errors(body))[:5]


_VALIDATORS: Dict[int, Any] = {}  # id(content) -> (content, its validator): the documents are kept (_document)


def _validator(document: Dict[str, Any], content: Dict[str, Any]) -> Any:
    """A JSON Schema 2020-12 validator of ``content``'s schema, made once per answer's content."""
    kept = _VALIDATORS.get(id(content))
    if kept is None or kept[0] is not content:
        # the schema's $refs point into the document's components: they go in the root beside it
        schema = {**content["schema"], "components": document["components"]}
        kept = _VALIDATORS[id(content)] = (content, _scalar_arrays_validator()(schema))
    return kept[1]


def _scalar_types(schema: Any) -> Optional[List[str]]:
    """The JSON types an item schema allows where it is nothing but types: ``{"type": T}``, or an
    ``anyOf`` of such (a description aside); None for any other schema."""
    if not isinstance(schema, dict):
        return None
    rest = {key: value for key, value in schema.items() if key != "description"}
    if set(rest) == {"type"} and isinstance(rest["type"], str):
        return [rest["type"]]
    if set(rest) == {"anyOf"}:
        parts = [_scalar_types(option) for option in rest["anyOf"]]
        return [kind for part in parts if part is not None for kind in part] if None not in parts else None
    return None


def _items(validator: Any, items: Any, instance: Any, schema: Dict[str, Any]) -> Iterator[Any]:
    """2020-12's ``items``, with arrays of scalars (the vectors: 2P numbers each, one per doc, sentence
    or token) checked by type alone: where every item is of a type the item schema allows, it has no error to
    find; any other array, and any array with an item of another type, goes to jsonschema's own."""
    from jsonschema import Draft202012Validator

    kinds = _scalar_types(items) if "prefixItems" not in schema else None
    if kinds is not None and validator.is_type(instance, "array"):
        if all(any(validator.is_type(item, kind) for kind in kinds) for item in instance):
            return
    yield from Draft202012Validator.VALIDATORS["items"](validator, items, instance, schema)


@functools.lru_cache(maxsize=1)
def _scalar_arrays_validator() -> Any:
    """Draft 2020-12's validator with ``_items`` (made on first use: jsonschema is imported only where
    answers are checked)."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(Draft202012Validator, {"items": _items})


@functools.lru_cache(maxsize=4)
def _document(routes: tuple) -> Dict[str, Any]:
    """The document of ``routes`` (the route table's items), for the default limits (answers'
    schemas do not depend on them)."""
    from spacy_elmo.serving.openapi import openapi_document
    from spacy_elmo.serving.requests import ServeLimits

    return openapi_document(dict(routes), ServeLimits())


def check_answer(response: httpx.Response) -> None:
    """Fail (AssertionError) where ``response`` is not as the document of the route table says."""
    from spacy_elmo.serving.gateway import ROUTES

    if not response.is_closed:  # streamed, and not read yet: nothing to check
        return
    problems = answer_problems(_document(tuple(ROUTES.items())), response)
    assert not problems, "an answer of serve is not as /openapi.json says:\n" + "\n".join(problems)


def _checked_send(send: Any) -> Any:
    @functools.wraps(send)
    def checked(client: httpx.Client, request: httpx.Request, *args: Any, **kwargs: Any) -> httpx.Response:
        response = send(client, request, *args, **kwargs)
        check_answer(response)
        return response

    return checked


def _checked_async_send(send: Any) -> Any:
    @functools.wraps(send)
    async def checked(client: httpx.AsyncClient, request: httpx.Request, *args: Any, **kwargs: Any) -> httpx.Response:
        response = await send(client, request, *args, **kwargs)
        check_answer(response)
        return response

    return checked


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: object):
    """Around a serve file's test (setup, call, teardown: its module fixtures too), httpx's clients
    check each answer."""
    if not item.path.name.startswith(SERVE_FILES) or not _serving_installed():
        return (yield)
    sync, asynchronous = httpx.Client.send, httpx.AsyncClient.send
    httpx.Client.send = _checked_send(sync)  # type: ignore[method-assign]
    httpx.AsyncClient.send = _checked_async_send(asynchronous)  # type: ignore[method-assign]
    try:
        return (yield)
    finally:
        httpx.Client.send, httpx.AsyncClient.send = sync, asynchronous  # type: ignore[method-assign]


@functools.lru_cache(maxsize=1)
def _serving_installed() -> bool:
    """Whether the service can be imported here (the serve extra); where not, its tests skip."""
    try:
        import spacy_elmo.serving.gateway  # noqa: F401
    except ImportError:
        return False
    return True
