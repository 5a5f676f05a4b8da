"""The service's OpenAPI document (``GET /openapi.json``) and its page (``GET /docs``): every route is
in it with its method, key, request body and answers; every route's real answers, 2xx and 4xx,
hold to it (and so does every answer of the other serve files: tests/served_schema.py); the
parsers accept exactly the request bodies it describes; and the page shows it with nothing
fetched from elsewhere."""

import asyncio
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("uvicorn", reason="the serve extra (pip install spacy-elmo[serve]) is not installed")
httpx = pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")

from served_schema import answer_problems, check_answer  # noqa: E402

from spacy_elmo.serving.gateway import ROUTES, Gateway  # noqa: E402
from spacy_elmo.serving.openai_api import parse_openai_request  # noqa: E402
from spacy_elmo.serving.openapi import docs_page, openapi_document  # noqa: E402
from spacy_elmo.serving.requests import BadRequest, ServeLimits, parse_request  # noqa: E402
from spacy_elmo.serving.settings import ServeSettings  # noqa: E402

KEY = "openapi-key"
WITH_KEY = {"Authorization": f"Bearer {KEY}"}
SMALL = ServeLimits(max_body_bytes=2**20, max_docs=3, max_chars=12, max_words=4)  # limits a test reaches


@pytest.fixture(scope="module")
def embedder(tiny_weights):
    from spacy_elmo.serving.embedder import Embedder

    return Embedder(ServeSettings(source=str(tiny_weights), threads=1))


def gateway_of(embedder, **options):
    return Gateway(ServeSettings(source="tiny", threads=1, api_key=KEY, **options), embedder)


def talk(gateway, conversation):
    async def run():
        transport = httpx.ASGITransport(app=gateway.asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await conversation(client, gateway)

    return asyncio.run(run())


def test_every_route_is_an_operation_with_its_method_key_body_and_answers():
    document = openapi_document(ROUTES, ServeLimits())
    assert document["openapi"] == "3.1.0" and set(document["paths"]) == set(ROUTES)
    for path, route in ROUTES.items():
        (method, operation), *others = document["paths"][path].items()
        assert method == route.method.lower() and not others, (path, method, others)
        statuses = set(operation["responses"])
        assert {"200", "405"} <= statuses, (path, statuses)
        assert operation["security"] == ([] if route.open else [{"apiKey": []}]), path
        assert ("401" in statuses) is (not route.open), (path, statuses)
        assert ("requestBody" in operation) is (route.method == "POST"), path
    assert {path for path, route in ROUTES.items() if route.open} == {"/health", "/ready", "/openapi.json", "/docs"}
    assert document["components"]["securitySchemes"]["apiKey"] == {
        **document["components"]["securitySchemes"]["apiKey"],
        "type": "http",
        "scheme": "bearer",
    }
    openai = document["paths"]["/v1/embeddings"]["post"]["responses"]["422"]["content"]["application/json"]
    assert openai["schema"] == {"$ref": "#/components/schemas/OpenAIErrorAnswer"}, "OpenAI's error form there"


def test_the_document_is_valid_openapi_3_1():
    """As the OpenAPI Initiative's schema of 3.1 has it (what client generators read)."""
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(openapi_document(ROUTES, SMALL))
    broken = openapi_document(ROUTES, SMALL)
    del broken["paths"]["/embed"]["post"]["responses"]["200"]["description"]
    with pytest.raises(Exception, match="description"):
        validator.validate(broken)


def test_the_request_bodies_carry_the_services_limits():
    schemas = openapi_document(ROUTES, SMALL)["components"]["schemas"]
    embed, openai = schemas["EmbedBody"]["properties"], schemas["OpenAIEmbeddingsBody"]["properties"]
    assert (embed["texts"]["maxItems"], embed["texts"]["items"]["maxLength"]) == (SMALL.max_docs, SMALL.max_chars)
    assert (embed["words"]["maxItems"], embed["words"]["items"]["maxItems"]) == (SMALL.max_docs, SMALL.max_words)
    listed = openai["input"]["anyOf"][1]
    assert (listed["maxItems"], listed["items"]["maxLength"]) == (SMALL.max_docs, SMALL.max_chars)


def requests_of_every_answer(client, gateway):
    """One request for each answer the document lists: each route's 2xx, 401, 405, and the
    embedding routes' 400, 413, 422, 429 and 503; /ready's 503; a path no route has."""
    good = {"/embed": {"texts": ["The cat sat."]}, "/v1/embeddings": {"input": "The cat sat.", "model": "elmo"}}
    too_many = {"/embed": {"texts": ["a"] * 65}, "/v1/embeddings": {"input": ["a"] * 65, "model": "elmo"}}
    unknown = {path: {**body, "colour": 1} for path, body in good.items()}

    async def both(bodies):
        return [await client.post(path, json=bodies[path], headers=WITH_KEY) for path in bodies]

    async def run():
        answers = await both(good)
        for path, route in ROUTES.items():
            if route.method == "GET":
                answers.append(await client.get(path, headers=WITH_KEY))
            answers.append(await client.request("PUT", path, headers=WITH_KEY))
            answers.append(await client.request(route.method, path))  # no key: 401 where not open
        answers += [await client.post(path, content=b"", headers=WITH_KEY) for path in good]
        answers += await both(unknown) + await both(too_many)
        answers.append(await client.get("/nowhere"))
        gateway._admit(+1)  # as if a request were in the service, at the limit of 1
        answers += await both(good)
        gateway._admit(-1)
        gateway.drain()
        answers += await both(good)
        answers.append(await client.get("/ready"))
        return answers

    return run()


def test_every_answer_of_every_route_holds_to_the_document(embedder):
    """Each (path, method, status) the document lists, answered for real, and as documented."""
    gateway = gateway_of(embedder, max_concurrent_requests=1)
    answers = talk(gateway, requests_of_every_answer)
    document = json.loads(gateway.openapi)
    for answer in answers:
        assert answer_problems(document, answer) == [], answer.text[:300]
    got = {(answer.request.url.path, answer.status_code) for answer in answers}
    operations = [(path, operation) for path, each in document["paths"].items() for operation in each.values()]
    listed = {(path, int(status)) for path, operation in operations for status in operation["responses"]}
    assert listed <= got, f"documented, never answered here: {sorted(listed - got)}"
    assert ("/nowhere", 404) in got


def test_a_wrong_answer_is_caught_with_what_is_wrong():
    """The check the suite runs on every answer finds what the document does not allow."""

    def answer(method, path, status, body, headers=None):
        request = httpx.Request(method, f"http://gateway{path}")
        return httpx.Response(status, content=json.dumps(body).encode(), headers=headers, request=request)

    json_type = {"content-type": "application/json"}
    document = openapi_document(ROUTES, ServeLimits())
    wrong = {
        "a field too many": answer("GET", "/health", 200, {"status": "ok", "extra": 1}, json_type),
        "a value not allowed": answer("GET", "/ready", 200, {"ready": "yes"}, json_type),
        "a status not documented": answer("GET", "/health", 418, {"error": "teapot"}, json_type),
        "no Retry-After": answer("POST", "/embed", 429, {"error": "busy"}, json_type),
        "the plain error form on the OpenAI route": answer("POST", "/v1/embeddings", 422, {"error": "x"}, json_type),
        "another media type": answer("GET", "/health", 200, {"status": "ok"}, {"content-type": "text/plain"}),
    }
    # served_schema checks an array of numbers by its items' types at once: each item still counts
    fine = {
        "words": ["A", "b"],
        "vector": [0.5, None],
        "vectors": [[0.5, 1.0], [None, 2.0]],
        "sentences": [{"start": 0, "end": 2, "vector": [1, -2.5]}],
    }
    for name, item in (("a string", "0.5"), ("true", True), ("a list", [0.5]), ("an object", {"x": 1})):
        for field, doc in (
            ("vector", {**fine, "vector": [item, 0.5]}),
            ("vectors", {**fine, "vectors": [[0.5, 1.0], [None, item]]}),
            ("sentences", {**fine, "sentences": [{"start": 0, "end": 2, "vector": [1, item]}]}),
        ):
            wrong[f"{name} in a doc's {field}"] = answer("POST", "/embed", 200, {"docs": [doc]}, json_type)

    def openai(embedding):
        data = [{"object": "embedding", "index": 0, "embedding": embedding}]
        usage = {"prompt_tokens": 2, "total_tokens": 2}
        return answer(
            "POST", "/v1/embeddings", 200, {"object": "list", "data": data, "model": "elmo", "usage": usage}, json_type
        )

    wrong["a string in an OpenAI embedding"] = openai([0.5, "x"])
    for name, response in wrong.items():
        assert answer_problems(document, response), name
    with pytest.raises(AssertionError, match="not as /openapi.json says"):
        check_answer(wrong["a field too many"])
    assert answer_problems(document, answer("GET", "/health", 200, {"status": "ok"}, json_type)) == []
    assert answer_problems(document, answer("POST", "/embed", 200, {"docs": [fine]}, json_type)) == []
    assert answer_problems(document, openai([0.5, -1])) == answer_problems(document, openai("AAAAPw==")) == []


def test_the_answers_of_this_files_tests_are_checked_as_they_arrive():
    """served_schema's check wraps httpx's clients while a serve file's test runs (this one too)."""
    for client in (httpx.Client, httpx.AsyncClient):
        assert getattr(client.send, "__wrapped__", None) is not None, f"{client.__name__}.send is not checked"


def test_the_served_document_and_page_are_open_and_as_built(embedder):
    gateway = gateway_of(embedder, limits=SMALL)

    async def conversation(client, gateway):
        return await client.get("/openapi.json"), await client.get("/docs")

    document, page = talk(gateway, conversation)
    assert document.status_code == 200 and document.json() == openapi_document(ROUTES, SMALL)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.content == docs_page()


class Fetched(HTMLParser):
    """Every address a page's tags name (src, href) and its inline styles' url() and @import."""

    def __init__(self) -> None:
        super().__init__()
        self.addresses: list = []

    def handle_starttag(self, tag, attrs):
        self.addresses.extend(value for name, value in attrs if name in ("src", "href") and value)


def test_the_page_fetches_nothing_from_elsewhere():
    page = docs_page().decode("utf-8")
    tags = Fetched()
    tags.feed(page)
    assert tags.addresses == [], tags.addresses
    assert not re.search(r"url\(|@import|https?:|//[a-z]", page.replace("<!--", "").split("<script>")[0].lower())
    fetched = re.findall(r"fetch\(([^)]*\))", page)
    assert len(fetched) == 1 and "/openapi.json" in fetched[0], fetched


# A DOM of what docs_page.html's script uses, enough to run it in node: the page's text, then
# the addresses it fetched, are printed
FAKE_DOM = """
class Node {
  constructor(tag) { this.tag = tag; this.children = []; this.text = ""; this.cells = []; }
  set textContent(value) { this.text = value; this.children = []; }
  get textContent() { return this.text + this.children.map((c) => c.textContent).join(" "); }
  append(...nodes) { this.children.push(...nodes); }
  insertRow() { const row = new Node("tr"); this.append(row); return row; }
  insertCell() { const cell = new Node("td"); this.append(cell); this.cells.push(cell); return cell; }
}
const ids = {};
globalThis.document = {
  createElement: (tag) => new Node(tag),
  getElementById: (id) => (ids[id] = ids[id] || new Node("div")),
};
globalThis.location = { pathname: "/prefix/docs" };
const fetched = [];
const spec = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8"));
globalThis.fetch = (url) => { fetched.push(url); return Promise.resolve({ ok: true, json: () => spec }); };
eval(require("fs").readFileSync(process.argv[3], "utf8"));
setTimeout(() => {
  if (ids.failure && ids.failure.text) throw new Error(ids.failure.text);
  console.log(["title", "security", "routes", "schemas"].map((id) => ids[id].textContent).join("\\n"));
  console.log("FETCHED " + fetched.join(" "));
}, 50);
"""


def test_the_page_shows_every_route_status_and_schema(tmp_path):
    """The page's own script, run in node over a small DOM: it reads openapi.json beside it and
    shows every route with its key, every answer's status and every schema's fields."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page's script cannot run here")
    document = openapi_document(ROUTES, ServeLimits())
    (tmp_path / "openapi.json").write_text(json.dumps(document))
    script = re.search(r"<script>(.*)</script>", docs_page().decode("utf-8"), flags=re.DOTALL).group(1)
    (tmp_path / "page.js").write_text(script)
    (tmp_path / "dom.js").write_text(FAKE_DOM)
    run = [node, str(tmp_path / "dom.js"), str(tmp_path / "openapi.json"), str(tmp_path / "page.js")]
    shown = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().endswith("FETCHED /prefix/openapi.json"), shown.stdout[-300:]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert f"{method.upper()} {path} {'open' if not operation['security'] else 'needs the key'}" in shown.stdout
            assert all(f" {status} " in shown.stdout for status in operation["responses"]), path
    for name, schema in document["components"]["schemas"].items():
        assert name in shown.stdout and all(field in shown.stdout for field in schema.get("properties", {})), name


# Request bodies as a client might send them: the fields of both routes and others, values of
# the right and the wrong shapes, around SMALL's limits (no lone surrogates and no body over the
# byte limit: JSON Schema cannot say those, and the parsers' own tests hold them)
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=14) | st.sampled_from(["", " ", "\t"])
JUNK = st.recursive(st.none() | st.booleans() | st.integers(-3, 40) | TEXT, lambda inner: st.lists(inner, max_size=3))
TEXTS = st.lists(TEXT, max_size=4)
SHAPED = {
    "texts": TEXTS,
    "words": st.lists(TEXTS, max_size=4),
    "input": TEXT | TEXTS | st.lists(st.integers(0, 9), min_size=1, max_size=2),
    "model": TEXT,
    "user": st.none() | TEXT,
    "tokens": st.sampled_from(["mix", "layers", "none", "all"]),
    "dtype": st.sampled_from(["float32", "float16", "int8"]),
    "encoding_format": st.sampled_from(["float", "base64", "hex"]),
}
FIELD_VALUES = {field: shaped | JUNK for field, shaped in SHAPED.items()}
BODIES = st.fixed_dictionaries({}, optional={**FIELD_VALUES, "colour": JUNK}) | JUNK


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=BODIES)
def test_the_parsers_accept_exactly_the_bodies_the_document_describes(body):
    """``POST /embed``'s and ``/v1/embeddings``' parsers, and the request schemas the document
    gives for the same limits: one accepts a body where, and only where, the other does."""
    document = openapi_document(ROUTES, SMALL)
    parsers = {"/embed": parse_request, "/v1/embeddings": parse_openai_request}
    for path, parse in parsers.items():
        schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        valid = jsonschema.Draft202012Validator({**schema, "components": document["components"]}).is_valid(body)
        try:
            parse(json.dumps(body).encode(), SMALL)
            accepted = True
        except BadRequest:
            accepted = False
        assert accepted is valid, (path, body)
