"""The service's parts without a server: the continuous batcher, and the gateway (keys, 429s,
retries, drain, metrics, the OpenAI route) in front of an embedder that runs here, spoken to over
ASGI as uvicorn speaks to it."""

import asyncio
import base64
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import orjson
import pytest

pytest.importorskip("ray.serve", reason="the ray extra (pip install spacy-elmo[ray]) is not installed")
httpx = pytest.importorskip("httpx")

from conftest import SHARED  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from ray.exceptions import ActorDiedError  # noqa: E402

from spacy_elmo.serving import gateway as gateway_module  # noqa: E402
from spacy_elmo.serving.batcher import REFILL_SHARE, ContinuousBatcher  # noqa: E402
from spacy_elmo.serving.embedder import Embedder  # noqa: E402
from spacy_elmo.serving.gateway import RETRY_AFTER_S, Gateway, Route, json_response  # noqa: E402
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


def test_a_run_that_loses_a_result_fails_each_request_of_its_batch_and_the_batcher_goes_on():
    """A run that answers fewer items than it was given: each request of that batch gets the error
    (none waits forever, none gets another's result), and the next batch is answered."""
    losing = [True]

    def run(items):
        results = [item.upper() for item in items]
        return (results[:-1] if losing[0] else results), sum(map(len, items))

    async def scenario():
        work = batcher(run)
        lost = [asyncio.ensure_future(work.submit(item)) for item in ("a", "b")]
        outcomes = await asyncio.wait_for(asyncio.gather(*lost, return_exceptions=True), 60)
        losing[0] = False
        return outcomes, await asyncio.wait_for(work.submit("after"), 60)

    outcomes, after = asyncio.run(scenario())
    assert all(isinstance(o, RuntimeError) and "the batch run returned" in str(o) for o in outcomes), outcomes
    assert after[0] == "AFTER"


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


class Clock:
    """Seconds that pass only when the test says (``advance``)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


async def one_ran_while_others_waited(others, run_s):
    """A batcher whose first request ("a") ran alone for ``run_s`` seconds of its clock while
    ``others`` arrived: (the run, the batcher, a's answer, the others' answers), a's batch done."""
    clock = Clock()
    run = Recorder(hold=True)
    work = batcher(run, max_tokens=100, clock=clock)
    first = asyncio.ensure_future(work.submit("a"))
    await settle(run)
    clock.advance(run_s)
    waiting = [asyncio.ensure_future(work.submit(item)) for item in others]
    await asyncio.sleep(0)
    run.release.set()
    return run, work, first, waiting


def test_a_closed_loop_of_clients_refills_one_batch_instead_of_splitting_in_two():
    """Four clients, each sending again when answered: after a batch of one ran while three waited,
    the replica holds the three until the fourth is back (REFILL_SHARE of the last run at most),
    and runs the four together; without the refill wait it would run the three, then the one."""

    async def scenario():
        run, work, first, waiting = await one_ran_while_others_waited(["b", "c", "d"], run_s=1.0)
        await first  # the replica is free; three wait, and it saw four
        for _ in range(5):
            await asyncio.sleep(0)
        held = list(run.batches)
        again = asyncio.ensure_future(work.submit("a2"))  # the first client, answered, sends again
        await asyncio.gather(again, *waiting)
        return held, run.batches

    held, batches = asyncio.run(scenario())
    assert held == [["a"]], "the three were held for the fourth"
    assert batches == [["a"], ["b", "c", "d", "a2"]]
    assert 0 < REFILL_SHARE < 1


def test_the_refill_wait_ends_at_its_share_of_the_last_run():
    async def scenario():
        run, _, first, waiting = await one_ran_while_others_waited(["b"], run_s=0.0)  # no wait: ran 0 s
        return await asyncio.gather(first, *waiting), run.batches

    _, batches = asyncio.run(scenario())
    assert batches == [["a"], ["b"]]


def test_a_lone_client_is_never_held():
    """One client in a closed loop: each request starts at once, however long the last one ran (a
    refill wait would hold the second for REFILL_SHARE x 1000 s of the clock, far past the 10 s the
    test allows)."""

    async def scenario():
        clock = Clock()
        run = Recorder(hold=True)
        work = batcher(run, max_tokens=100, clock=clock)
        answers = []
        for item in ("a", "b", "c"):
            answer = asyncio.ensure_future(work.submit(item))
            assert await asyncio.to_thread(run.started.wait, 10), f"{item} was held"
            run.started.clear()
            clock.advance(1000.0)  # the batch runs for 1000 s of the clock
            run.release.set()
            answers.append(await answer)
            run.release.clear()
        return [answer for answer, _ in answers], run.batches

    answers, batches = asyncio.run(scenario())
    assert answers == ["A", "B", "C"] and batches == [["a"], ["b"], ["c"]]


class Flaky:
    """The gateway's ``Replicas`` over ``target`` (an embedder here), as Ray Serve replicas behave
    where they die: ``failures`` raise first, one an embedding call; ``lost`` names them."""

    lost = (ActorDiedError,)

    def __init__(self, target, failures=()):
        self.target, self.failures, self.calls = target, list(failures), 0

    async def embed(self, request):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return await self.target.embed(request)

    async def describe(self):
        return await self.target.describe()


@pytest.fixture(scope="module")
def embedder(tiny_weights):
    return Embedder(ServeSettings(source=str(tiny_weights), threads=1))


def client_of(gateway):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway.asgi), base_url="http://gateway")


def talk(gateway, conversation):
    async def run():
        async with client_of(gateway) as client:
            return await conversation(client)

    return asyncio.run(run())


def gateway_of(embedder, failures=(), **settings):
    settings = ServeSettings(source="tiny", threads=1, **settings)
    replicas = Flaky(embedder, failures)
    return Gateway(settings, replicas), replicas


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

    async def describe(self):
        return await self.embedder.describe()

    async def embed(self, request):
        self.held += 1
        await self.release.wait()
        return await self.embedder.embed(request)

    async def holding(self, count: int, seconds: float = 60) -> None:
        """Once ``count`` requests are held; fails the test, saying how many arrived, after ``seconds``
        (a hang guard for a slow machine, not a timing check)."""
        deadline = time.monotonic() + seconds
        while self.held < count:
            assert time.monotonic() < deadline, f"{count} requests held within {seconds} s: only {self.held} arrived"
            await asyncio.sleep(0.01)


def test_beyond_the_limit_a_request_gets_429_at_once_and_admitted_ones_are_answered(embedder):
    held = Held(embedder)
    gateway, _ = gateway_of(held, max_concurrent_requests=3)

    async def conversation(client):
        held.release = asyncio.Event()
        admitted = [asyncio.ensure_future(client.post("/embed", json={"texts": [f"Text {i}."]})) for i in range(3)]
        await held.holding(3)
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
    gateway, replicas = gateway_of(embedder, failures=[ActorDiedError()])

    async def conversation(client):
        answer = await client.post("/embed", json={"texts": ["Retried."]})
        return answer, (await client.get("/metrics")).text

    answer, metrics = talk(gateway, conversation)
    assert answer.status_code == 200 and answer.json()["docs"][0]["words"] == ["Retried", "."]
    assert replicas.calls == 2 and samples(metrics, "spacy_elmo_replica_failures_total") == {(): 1.0}


def test_where_no_replica_comes_back_the_answer_is_503_with_retry_after(embedder):
    gateway, replicas = gateway_of(embedder, failures=[ActorDiedError(), ActorDiedError()])

    async def conversation(client):
        answer = await client.post("/embed", json={"texts": ["Lost."]})
        return answer, (await client.get("/metrics")).text

    answer, metrics = talk(gateway, conversation)
    assert answer.status_code == 503 and answer.headers["retry-after"] == str(RETRY_AFTER_S)
    assert "no replica could embed the request" in answer.json()["error"] and replicas.calls == 2
    assert samples(metrics, "spacy_elmo_replica_failures_total") == {(): 1.0}, "one request, counted once"


def test_draining_answers_what_is_in_flight_and_refuses_the_rest(embedder):
    held = Held(embedder)
    gateway, _ = gateway_of(held)

    async def conversation(client):
        held.release = asyncio.Event()
        in_flight = asyncio.ensure_future(client.post("/embed", json={"texts": ["In flight."]}))
        await held.holding(1)
        cut_short = await gateway.drained(0)  # no time to wait: the one in the service is left
        draining = asyncio.ensure_future(gateway.drained(60))
        refused = await client.post("/embed", json={"texts": ["Too late."]})
        ready = await client.get("/ready")
        waited = not draining.done()
        held.release.set()
        return cut_short, waited, await draining, await in_flight, refused, ready

    cut_short, waited, left, answered, refused, ready = talk(gateway, conversation)
    assert cut_short == 1 and waited, "the drain waits for the request in the service"
    assert left == 0 and answered.status_code == 200
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
    for item, doc in zip(body["data"], docs, strict=True):
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


def test_the_route_table_decides_where_a_request_goes_and_its_404s_and_405s(monkeypatch, embedder):
    """A route added to ``ROUTES`` is answered by its handler, with its method, key and error form;
    a path not there gets 404, another method 405, each naming the routes there are."""

    async def echo(gateway, request, error):
        return json_response({"echo": request.url.path})

    monkeypatch.setitem(gateway_module.ROUTES, "/echo", Route("PUT", echo, open=True))
    gateway, _ = gateway_of(embedder, api_key=KEY)

    async def conversation(client):
        return {
            "echo": await client.put("/echo"),
            "echo by GET": await client.get("/echo"),
            "nowhere": await client.get("/nowhere"),
            "embed by GET": await client.get("/embed", headers={"Authorization": f"Bearer {KEY}"}),
            "openai by GET": await client.get("/v1/embeddings", headers={"Authorization": f"Bearer {KEY}"}),
            "health by POST": await client.post("/health"),
        }

    got = talk(gateway, conversation)
    assert got["echo"].status_code == 200 and got["echo"].json() == {"echo": "/echo"}, "open: no key asked"
    routes = "POST /embed, /v1/embeddings; GET /metadata, /metrics, /health, /ready, /openapi.json, /docs"
    assert got["echo by GET"].status_code == 405 and got["echo by GET"].json()["error"].startswith("/echo takes PUT")
    assert got["nowhere"].status_code == 404 and got["nowhere"].json()["error"] == f"no route GET /nowhere: {routes}"
    embed = got["embed by GET"]
    assert embed.status_code == 405 and embed.json()["error"] == f"/embed takes POST: {routes}"
    openai = got["openai by GET"]
    assert openai.status_code == 405 and openai.json()["error"]["message"] == f"/v1/embeddings takes POST: {routes}"
    assert got["health by POST"].status_code == 405, "open routes check their method too"


def test_the_openai_route_without_a_replica_to_describe_the_model_is_503():
    class Gone:
        async def describe(self):
            raise ActorDiedError()

    gateway, _ = gateway_of(Gone())
    answer = talk(gateway, lambda client: client.post("/v1/embeddings", json={"input": "a", "model": "m"}))
    assert answer.status_code == 503 and answer.headers["retry-after"] == str(RETRY_AFTER_S)
    assert answer.json()["error"]["type"] == "service_unavailable"


def test_the_engine_is_decided_once_from_the_settings():
    def on_ray(**options):
        return ServeSettings(source="tiny", threads=1, **options).runs_on_ray

    assert not on_ray() and not on_ray(device="cuda")  # one replica here: one process
    assert on_ray(replicas=2) and on_ray(ray_address="ray://head:10001") and on_ray(engine="ray")
    with pytest.raises(ValueError, match="--engine process runs one replica in this process, and 2 replica"):
        ServeSettings(source="tiny", threads=1, engine="process", replicas=2)
    with pytest.raises(ValueError, match=r"port must be between 1 and 65535, got 0 \(0, any free port, needs"):
        ServeSettings(source="tiny", threads=1, engine="ray", port=0)
    with pytest.raises(ValueError, match="engine must be one of"):
        ServeSettings(source="tiny", threads=1, engine="uvicorn")


def test_a_port_in_use_is_said_before_anything_loads():
    import socket

    from spacy_elmo.serving.process_engine import bound_socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=f"cannot listen on 127.0.0.1:{port} .*give another --port"):
            bound_socket("127.0.0.1", port)
    free = bound_socket("127.0.0.1", 0)
    try:
        assert free.getsockname()[1] > 0
    finally:
        free.close()


def test_an_answer_pools_the_mix_computed_once_to_the_bits_of_the_extensions(embedder):
    """``/embed`` mixes each doc's tokens once and pools them for the doc and its sentences: the
    numbers of ``doc._.elmo``, ``sent._.elmo`` and ``token._.elmo`` to the bit, on 60 real lines of
    1 to 5 sentences (spaces and punctuation included)."""
    from spacy_elmo.serving.requests import EmbedRequest
    from spacy_elmo.serving.responses import embed_requests

    lines = (SHARED / "data" / "corpus" / "valid.txt").read_text(encoding="utf-8").splitlines()
    texts = [line for line in lines if line.strip()][:60] + ["Two  spaces, and a tab\there. Then more."]
    bodies, _ = embed_requests(embedder.nlp, [EmbedRequest(texts=tuple(texts))])
    answered = orjson.loads(bodies[0])["docs"]
    assert len(answered) == len(texts), f"{len(answered)} docs for {len(texts)} texts"
    for text, got in zip(texts, answered, strict=True):
        doc = embedder.nlp(text)
        assert np.array_equal(np.array(got["vector"], dtype=np.float32), doc._.elmo)
        for sent, expected in zip(got["sentences"], doc.sents, strict=True):
            assert np.array_equal(np.array(sent["vector"], dtype=np.float32), expected._.elmo)
        assert np.array_equal(np.array(got["vectors"], dtype=np.float32), np.stack([t._.elmo for t in doc]))
    assert sum(len(got["sentences"]) > 1 for got in answered) >= 5, "docs of several sentences were checked"


def test_the_docs_say_which_keys_each_kind_of_answer_has(embedder):
    """docs/serving.md's table of keys, per ``tokens``, against real answers."""
    import re

    from spacy_elmo.serving.requests import EmbedRequest
    from spacy_elmo.serving.responses import embed_requests

    page = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text(encoding="utf-8")
    rows = re.findall(r'^\| `"(\w+)"` \| (.+) \|$', page, flags=re.MULTILINE)
    documented = {tokens: set(re.findall(r"(?:^|; )`(\w+)`", keys)) for tokens, keys in rows}
    assert set(documented) == {"mix", "layers", "none"}, documented
    for tokens, keys in documented.items():
        bodies, _ = embed_requests(embedder.nlp, [EmbedRequest(texts=("The bank raised its rates.",), tokens=tokens)])
        answered = orjson.loads(bodies[0])
        assert set(answered) == {"docs"} and set(answered["docs"][0]) == keys, (tokens, keys)
        assert set(answered["docs"][0]["sentences"][0]) == {"start", "end", "vector"}
