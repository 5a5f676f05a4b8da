"""The service's parts without Ray: the continuous batcher, and the gateway (keys, 429s, retries,
drain, metrics, the OpenAI route) in front of an embedder that runs here, spoken to over ASGI."""

import asyncio
import base64
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import orjson
import pytest

pytest.importorskip("ray.serve", reason="the serve extra (pip install spacy-elmo[serve]) is not installed")
httpx = pytest.importorskip("httpx")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from ray.exceptions import ActorDiedError  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Route  # noqa: E402

from spacy_elmo.serving.batcher import ContinuousBatcher  # noqa: E402
from spacy_elmo.serving.embedder import Embedder  # noqa: E402
from spacy_elmo.serving.gateway import RETRY_AFTER_S, Gateway  # noqa: E402
from spacy_elmo.serving.settings import ServeSettings  # noqa: E402

KEY = "s3cret-key"


class Recorder:
    """A batch run that records each batch and, where ``hold`` is set, waits for ``release``."""

    def __init__(self, hold: bool = False, fail_on=None):
        self.batches, self.hold, self.fail_on = [], hold, fail_on
        self.release, self.started = threading.Event(), threading.Event()

    def __call__(self, items):
        self.batches.append(list(items))
        self.started.set()
        if self.hold:
            assert self.release.wait(10)
        if self.fail_on in items:
            raise ValueError(f"cannot run {self.fail_on}")
        return [item.upper() for item in items], sum(map(len, items))


def batcher(run, **options):
    options.setdefault("max_tokens", 10)
    return ContinuousBatcher(run, ThreadPoolExecutor(1), size=len, docs=lambda item: 1, **options)


async def settle(run: Recorder) -> None:
    """Let the event loop hand the running batch to the worker."""
    await asyncio.to_thread(run.started.wait, 10)
    run.started.clear()


def test_a_lone_request_starts_at_once_and_arrivals_meanwhile_form_the_next_batch():
    async def scenario():
        run = Recorder(hold=True)
        work = batcher(run)
        first = asyncio.ensure_future(work.submit("a"))
        for _ in range(3):  # a few turns of the loop, no time: a timer would still hold the batch
            await asyncio.sleep(0)
        assert await asyncio.to_thread(run.started.wait, 10) and run.batches == [["a"]]
        run.started.clear()
        rest = [asyncio.ensure_future(work.submit(item)) for item in ("bb", "ccc", "dddddd", "e")]
        await asyncio.sleep(0)
        assert work.waiting == 4
        run.release.set()
        results = await asyncio.gather(first, *rest)
        return run.batches, results

    batches, results = asyncio.run(scenario())
    # what arrived while "a" ran is the next batch, up to 10 tokens; what did not fit, the one after
    assert batches == [["a"], ["bb", "ccc"], ["dddddd", "e"]]
    assert [answer for answer, _ in results] == ["A", "BB", "CCC", "DDDDDD", "E"]
    figures = [figure for _, figure in results]
    assert [f.number for f in figures] == [1, 2, 2, 3, 3] and figures[1].tokens == 5 and figures[1].requests == 2
    assert figures[1].waiting == 2  # "dddddd" and "e" waited when the second batch started
    assert [f.reports for f in figures] == [True, True, False, True, False]  # one answer reports each batch


def test_a_batch_reports_what_waited_when_it_started_not_when_it_ended():
    async def scenario():
        gate, started = threading.Semaphore(0), threading.Event()

        def run(items):
            started.set()
            assert gate.acquire(timeout=10)
            return [item.upper() for item in items], sum(map(len, items))

        work = batcher(run)
        first = asyncio.ensure_future(work.submit("a"))
        assert await asyncio.to_thread(started.wait, 10)  # the first batch runs, nothing waiting
        later = asyncio.ensure_future(work.submit("b"))  # arrives while it runs
        await asyncio.sleep(0)
        gate.release()
        gate.release()
        return await asyncio.gather(first, later)

    (_, first), (_, later) = asyncio.run(scenario())
    assert (first.number, first.waiting) == (1, 0) and (later.number, later.waiting) == (2, 0)


def test_one_request_a_batch_starts_without_the_wait_for_more():
    """Without batching (one request a batch), a request fills its batch: ``max_wait_s`` holds
    nothing (a 30 s wait would keep this lone request waiting past the 10 s the test allows)."""

    async def scenario():
        run = Recorder()
        work = batcher(run, max_requests=1, max_wait_s=30)
        answer = asyncio.ensure_future(work.submit("a"))
        assert await asyncio.to_thread(run.started.wait, 10), "held by the wait for more requests"
        return await answer

    assert asyncio.run(scenario())[0] == "A"


def test_a_request_whose_client_left_is_dropped_and_a_failure_stays_with_its_batch():
    async def scenario():
        run = Recorder(hold=True, fail_on="bad")
        work = batcher(run, max_requests=1)
        first = asyncio.ensure_future(work.submit("a"))
        await settle(run)
        gone = asyncio.ensure_future(work.submit("gone"))
        bad = asyncio.ensure_future(work.submit("bad"))
        after = asyncio.ensure_future(work.submit("after"))
        await asyncio.sleep(0)
        gone.cancel()
        run.release.set()
        outcomes = await asyncio.gather(first, gone, bad, after, return_exceptions=True)
        return run.batches, outcomes

    batches, (first, gone, bad, after) = asyncio.run(scenario())
    assert batches == [["a"], ["bad"], ["after"]]  # one request a batch; "gone" never ran
    assert isinstance(gone, asyncio.CancelledError) and isinstance(bad, ValueError) and after[0] == "AFTER"


def test_a_request_above_the_budget_runs_alone():
    async def scenario():
        run = Recorder(hold=True)
        work = batcher(run, max_tokens=4)
        first = asyncio.ensure_future(work.submit("x"))
        await settle(run)
        rest = [asyncio.ensure_future(work.submit(item)) for item in ("a-very-long-one", "b")]
        await asyncio.sleep(0)
        run.release.set()
        await asyncio.gather(first, *rest)
        return run.batches

    assert asyncio.run(scenario()) == [["x"], ["a-very-long-one"], ["b"]]


class Local:
    """A stand-in for a Ray Serve handle: ``handle.method.remote(...)`` runs ``target``'s method here;
    ``failures`` raise first, one a call."""

    def __init__(self, target, failures=()):
        self.target, self.failures, self.calls = target, list(failures), 0

    def __getattr__(self, name):
        local = self

        class Method:
            def remote(self, *args):
                async def call():
                    local.calls += name == "embed"
                    if name == "embed" and local.failures:
                        raise local.failures.pop(0)
                    result = getattr(local.target, name)(*args)
                    return await result if asyncio.iscoroutine(result) else result

                return call()

        return Method()


@pytest.fixture(scope="module")
def embedder(tiny_weights):
    return Embedder(ServeSettings(source=str(tiny_weights), threads=1))


def client_of(gateway):
    async def endpoint(request):
        return await gateway(request)

    methods = ["GET", "POST", "PUT", "DELETE"]
    app = Starlette(routes=[Route("/{path:path}", endpoint, methods=methods)])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


def talk(gateway, conversation):
    async def run():
        async with client_of(gateway) as client:
            return await conversation(client)

    return asyncio.run(run())


def gateway_of(embedder, failures=(), **settings):
    settings = ServeSettings(source="tiny", threads=1, **settings)
    handle = Local(embedder, failures)
    return Gateway(settings, handle), handle


def test_a_key_guards_every_route_but_health_and_readiness(embedder):
    gateway, _ = gateway_of(embedder, api_key=KEY)

    async def conversation(client):
        body = {"texts": ["The cat sat."]}
        right = {"Authorization": f"Bearer {KEY}"}
        return {
            "none": await client.post("/embed", json=body),
            "wrong": await client.post("/embed", json=body, headers={"Authorization": "Bearer s3cret-kez"}),
            "scheme": await client.post("/embed", json=body, headers={"Authorization": f"Basic {KEY}"}),
            "right": await client.post("/embed", json=body, headers=right),
            "openai": await client.post("/v1/embeddings", json={"input": "a", "model": "m"}),
            "metrics": await client.get("/metrics"),
            "metadata": await client.get("/metadata", headers=right),
            "health": await client.get("/health"),
            "ready": await client.get("/ready"),
        }

    got = talk(gateway, conversation)
    for name in ("none", "wrong", "scheme", "metrics"):
        assert got[name].status_code == 401 and got[name].headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer KEY" in got[name].json()["error"]
    assert got["openai"].status_code == 401 and got["openai"].json()["error"]["type"] == "authentication_error"
    assert got["right"].status_code == 200 and got["right"].json()["docs"][0]["words"] == ["The", "cat", "sat", "."]
    assert got["metadata"].json()["api_key"] is True and KEY not in got["metadata"].text
    assert got["health"].status_code == 200 and got["ready"].json() == {"ready": True}


class Held:
    """An embedder that holds every request until ``release``, counting those it holds."""

    def __init__(self, embedder):
        self.embedder, self.held, self.release = embedder, 0, None

    def describe(self):
        return self.embedder.describe()

    async def embed(self, request):
        self.held += 1
        await self.release.wait()
        return await self.embedder.embed(request)


def test_beyond_the_limit_a_request_gets_429_at_once_and_admitted_ones_are_answered(embedder):
    held = Held(embedder)
    gateway, _ = gateway_of(held, max_concurrent_requests=3)

    async def conversation(client):
        held.release = asyncio.Event()
        admitted = [asyncio.ensure_future(client.post("/embed", json={"texts": [f"Text {i}."]})) for i in range(3)]
        while held.held < 3:
            await asyncio.sleep(0.01)
        refused = [await client.post("/embed", json={"texts": ["One too many."]}) for _ in range(2)]
        refused.append(await client.post("/v1/embeddings", json={"input": "One too many.", "model": "elmo"}))
        health = await client.get("/health")
        held.release.set()
        answered = await asyncio.gather(*admitted)
        after = await client.post("/embed", json={"texts": ["Room again."]})
        return refused, health, answered, after, (await client.get("/metrics")).text

    refused, health, answered, after, metrics = talk(gateway, conversation)
    assert [r.status_code for r in refused] == [429, 429, 429] and health.status_code == 200
    assert all(r.headers["retry-after"] == str(RETRY_AFTER_S) for r in refused)
    assert "--max-concurrent-requests" in refused[0].json()["error"]
    assert refused[2].json()["error"]["type"] == "rate_limit_error"
    assert [r.status_code for r in answered] == [200, 200, 200] and after.status_code == 200
    counts = samples(metrics, "spacy_elmo_requests_total")
    assert (
        counts[(("route", "/embed"), ("status", "429"))] == 2 and counts[(("route", "/embed"), ("status", "200"))] == 4
    )


def samples(text, name):
    """The samples of metric ``name`` in Prometheus ``text``, by their sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_a_request_whose_replica_died_is_sent_again_and_answered(embedder):
    gateway, handle = gateway_of(embedder, failures=[ActorDiedError()])

    async def conversation(client):
        answer = await client.post("/embed", json={"texts": ["Retried."]})
        return answer, (await client.get("/metrics")).text

    answer, metrics = talk(gateway, conversation)
    assert answer.status_code == 200 and answer.json()["docs"][0]["words"] == ["Retried", "."]
    assert handle.calls == 2 and samples(metrics, "spacy_elmo_replica_failures_total") == {(): 1.0}


def test_where_no_replica_comes_back_the_answer_is_503_with_retry_after(embedder):
    gateway, handle = gateway_of(embedder, failures=[ActorDiedError(), ActorDiedError()])

    async def conversation(client):
        answer = await client.post("/embed", json={"texts": ["Lost."]})
        return answer, (await client.get("/metrics")).text

    answer, metrics = talk(gateway, conversation)
    assert answer.status_code == 503 and answer.headers["retry-after"] == str(RETRY_AFTER_S)
    assert "no replica could embed the request" in answer.json()["error"] and handle.calls == 2
    assert samples(metrics, "spacy_elmo_replica_failures_total") == {(): 1.0}, "one request, counted once"


def test_draining_answers_what_is_in_flight_and_refuses_the_rest(embedder):
    held = Held(embedder)
    gateway, _ = gateway_of(held)

    async def conversation(client):
        held.release = asyncio.Event()
        in_flight = asyncio.ensure_future(client.post("/embed", json={"texts": ["In flight."]}))
        while held.held < 1:
            await asyncio.sleep(0.01)
        left = gateway.drain()
        refused = await client.post("/embed", json={"texts": ["Too late."]})
        ready = await client.get("/ready")
        held.release.set()
        return left, await in_flight, refused, ready, gateway.requests_in_service()

    left, answered, refused, ready, after = talk(gateway, conversation)
    assert left == 1 and answered.status_code == 200 and after == 0
    assert refused.status_code == 503 and refused.headers["retry-after"] == str(RETRY_AFTER_S)
    assert "shutting down" in refused.json()["error"] and ready.status_code == 503


def test_the_openai_route_answers_doc_vectors_in_openais_form(embedder):
    gateway, _ = gateway_of(embedder)
    texts = ["The cat sat on the mat.", "A dog ran."]

    async def conversation(client):
        floats = await client.post("/v1/embeddings", json={"input": texts, "model": "elmo-tiny"})
        packed = await client.post(
            "/v1/embeddings", json={"input": texts[0], "model": "m", "encoding_format": "base64"}
        )
        bad = await client.post("/v1/embeddings", json={"input": [[1, 2, 3]], "model": "m"})
        return floats, packed, bad

    floats, packed, bad = talk(gateway, conversation)
    body = floats.json()
    docs = [embedder.nlp(text) for text in texts]
    assert body["object"] == "list" and body["model"] == "elmo-tiny"
    assert [item["index"] for item in body["data"]] == [0, 1]
    for item, doc in zip(body["data"], docs):
        assert np.array_equal(np.array(item["embedding"], dtype=np.float32), doc._.elmo)
    tokens = sum(len(doc) for doc in docs)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    vector = np.frombuffer(base64.b64decode(packed.json()["data"][0]["embedding"]), dtype="<f4")
    assert np.array_equal(vector, docs[0]._.elmo)
    assert bad.status_code == 422 and "token ids" in bad.json()["error"]["message"]


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"input": "a"}, '"model" must be a non-empty string'),
        ({"input": "", "model": "m"}, "input[0] is empty"),
        ({"input": [], "model": "m"}, "input must be a non-empty list"),
        ({"input": "a", "model": "m", "encoding_format": "int8"}, "encoding_format must be one of"),
        ({"input": "a", "model": "m", "dimensions": 3}, "dimensions must be the model's width"),
        ({"input": "a", "model": "m", "temperature": 1}, "unknown fields"),
    ],
)
def test_the_openai_route_refuses_what_openai_refuses_with_its_error_form(embedder, payload, message):
    gateway, _ = gateway_of(embedder)
    answer = talk(gateway, lambda client: client.post("/v1/embeddings", content=orjson.dumps(payload)))
    error = answer.json()["error"]
    assert answer.status_code == 422 and message in error["message"] and error["type"] == "invalid_request_error"


def test_metrics_count_requests_batches_and_the_queue(embedder):
    gateway, _ = gateway_of(embedder)

    async def conversation(client):
        await asyncio.gather(*(client.post("/embed", json={"texts": ["One two three."] * 2}) for _ in range(3)))
        await client.post("/embed", content=b"{")
        await client.get("/nowhere")
        return await client.get("/metrics")

    answer = talk(gateway, conversation)
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    counts = samples(text, "spacy_elmo_requests_total")
    assert (
        counts[(("route", "/embed"), ("status", "200"))] == 3 and counts[(("route", "/embed"), ("status", "400"))] == 1
    )
    assert counts[(("route", "other"), ("status", "404"))] == 1
    latency = samples(text, "spacy_elmo_request_seconds_count")
    assert latency[(("route", "/embed"),)] == 4
    docs = samples(text, "spacy_elmo_batch_docs_sum")[()]
    tokens = samples(text, "spacy_elmo_batch_tokens_sum")[()]
    batches = samples(text, "spacy_elmo_batch_docs_count")[()]
    assert docs == 6 and tokens == 6 * 4 and 1 <= batches <= 3  # each batch counted once
    assert samples(text, "spacy_elmo_requests_in_service") == {(): 0.0}
    assert samples(text, "spacy_elmo_replica_restarts_total") == {(): 0.0}


def test_the_openai_route_without_a_replica_to_describe_the_model_is_503():
    class Gone:
        def describe(self):
            raise ActorDiedError()

    gateway, _ = gateway_of(Gone())
    answer = talk(gateway, lambda client: client.post("/v1/embeddings", json={"input": "a", "model": "m"}))
    assert answer.status_code == 503 and answer.headers["retry-after"] == str(RETRY_AFTER_S)
    assert answer.json()["error"]["type"] == "service_unavailable"
