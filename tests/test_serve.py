"""`python -m spacy_elmo serve`: started as a user starts it (one replica: in one process, on
127.0.0.1, a free port, stopped at the end), concurrent clients get bitwise what the pipeline gives
each text alone, bad input gets a 4xx with a message while the service keeps serving, it listens on
loopback only, and SIGTERM drains it. The request checks also run without a server."""

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("uvicorn", reason="the serve extra (pip install spacy-elmo[serve]) is not installed")
httpx = pytest.importorskip("httpx")

from served_process import (  # noqa: E402
    Served,
    http_get,
    http_post,
    is_loopback,
    listening_addresses,
    session_processes,
    sigterm_with_requests_in_flight,
)

from spacy_elmo.serving.requests import BadRequest, ServeLimits, parse_request  # noqa: E402

TEXTS = [
    "The cat sat on the mat. It purred.",
    "A dog ran far away",
    "Colorless green ideas sleep furiously; they do.",
    "Short.",
    "The bank of the river was steep, and the bank in town was closed.",
]
LIMITS = ServeLimits()
BAD_BODIES = [
    (b"", 400, "empty body"),
    (b'{"texts": ["a"', 400, "not JSON"),
    (b'{"texts": ["\xff\xfe"]}', 400, "not UTF-8"),
    (b"[1, 2]", 422, "expected a JSON object"),
    (b'{"texts": "one text"}', 422, "texts must be a non-empty list"),
    (b'{"texts": []}', 422, "texts must be a non-empty list"),
    (b'{"texts": [3]}', 422, "texts[0] must be a string"),
    (b'{"words": [["a", 3]]}', 422, "words[0] must be a list of non-empty strings"),
    (b'{"texts": ["a"], "words": [["a"]]}', 422, "either"),
    (b'{"texts": ["a"], "tokens": "all"}', 422, "tokens must be one of"),
    (b'{"texts": ["a"], "dtype": "int8"}', 422, "dtype must be one of"),
    (b'{"texts": ["a"], "colour": 1}', 422, "unknown fields"),
    (json.dumps({"texts": ["a"] * (LIMITS.max_docs + 1)}).encode(), 413, "the limit is 64"),
    (json.dumps({"texts": ["a" * (LIMITS.max_chars + 1)]}).encode(), 413, "characters; the limit is"),
    (json.dumps({"words": [["a"] * (LIMITS.max_words + 1)]}).encode(), 413, "words; the limit is"),
    (b" " * (LIMITS.max_body_bytes + 1), 413, "bytes; the limit is"),
    (b'{"texts": ["a \\ud800 b"]}', 422, "texts[0] holds a lone UTF-16 surrogate (\\ud800) at character 2"),
    (b'{"words": [["ok", "\\udfff"]]}', 422, "words[0][1] holds a lone UTF-16 surrogate"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    (b'{"texts": [' + b"7" * 5000 + b"]}", 400, "cannot be read"),
]


@pytest.mark.parametrize("body, status, message", BAD_BODIES, ids=[m for _, _, m in BAD_BODIES])
def test_each_bad_request_is_refused_with_its_status_and_what_to_fix(body, status, message):
    with pytest.raises(BadRequest) as refused:
        parse_request(body, LIMITS)
    assert refused.value.status == status and message in refused.value.message


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["\ud800", "a\udfff", "\ud83d\ude00", "", "mix", "float16", "x" * 30]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FIELDS = st.sampled_from(["texts", "words", "tokens", "dtype", "colour", "\ud800", "t" * 200])
BODIES = st.one_of(
    st.binary(max_size=200),
    JSON_VALUES.map(lambda value: json.dumps(value).encode()),
    st.dictionaries(FIELDS, JSON_VALUES, max_size=4).map(lambda value: json.dumps(value).encode()),
    st.integers(min_value=1, max_value=200_000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(min_value=4000, max_value=6000).map(lambda digits: b'{"texts": [' + b"9" * digits + b"]}"),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=BODIES)
def test_no_body_a_client_sends_is_an_error_of_the_service(body):
    """Any bytes: a request the service can answer (every string writable back as UTF-8), or a 4xx
    whose message can be written as JSON; never another exception (a 5xx)."""
    try:
        parsed = parse_request(body, LIMITS)
    except BadRequest as refused:
        assert 400 <= refused.status < 500
        orjson.dumps({"error": refused.message})
        return
    strings = parsed.texts if parsed.texts is not None else [word for words in parsed.words for word in words]
    assert all(isinstance(text, str) and text.encode("utf-8") is not None for text in strings)
    assert parsed.tokens in ("mix", "layers", "none") and parsed.dtype in ("float32", "float16")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=BODIES)
def test_the_running_service_answers_any_body_with_a_200_or_a_4xx(service, body):
    """The same bodies over HTTP to the service the docs describe: a 200 with the docs' vectors or a
    4xx saying what was wrong, as JSON; the service goes on answering."""
    answer = http_post(f"{service}/embed", content=body, headers={"Content-Type": "application/json"}, timeout=60)
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    if answer.status_code == 200:  # the service runs with the default limits, as LIMITS
        sent = parse_request(body, LIMITS).n_docs
        assert len(answer.json()["docs"]) == sent, f"{len(answer.json()['docs'])} docs for {sent} sent"
    else:
        assert answer.json()["error"], answer.text


def test_a_good_request_reads_back_as_sent():
    parsed = parse_request(b'{"words": [["The", "cat"]], "tokens": "layers", "dtype": "float16"}', LIMITS)
    assert parsed.words == (("The", "cat"),) and (parsed.tokens, parsed.dtype, parsed.n_docs) == (
        "layers",
        "float16",
        1,
    )


def test_the_source_is_read_as_a_pipeline_or_as_weights(tiny_weights, tiny_elmo_pipeline):
    from spacy_elmo.serving.embedder import is_pipeline

    assert is_pipeline(str(tiny_elmo_pipeline)) and is_pipeline("en_core_web_sm")  # a directory, a package
    assert not any(is_pipeline(s) for s in (str(tiny_weights), "original", "efml-de", "https://example.org/m.zip"))


@pytest.fixture(scope="module")
def served(tiny_weights):
    """The CLI serving the tiny weights in one process (the default for one replica), stopped at the
    end (Ctrl-C, as a user stops it) unless a test stopped it before. Ray is not installed there
    (None in sys.modules), as with `pip install spacy-elmo[serve]`: the tests here hold every route
    of the one-process engine without it (its modules import no Ray: test_serve_extras.py)."""
    process = Served(tiny_weights, hidden=["ray"])
    try:
        process.ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def service(served):
    return served.url


@pytest.fixture(scope="module")
def alone(tiny_weights):
    """The same pipeline as the service's, in this process: what a text gets alone."""
    from spacy_elmo.serving.embedder import load_served_pipeline
    from spacy_elmo.serving.settings import ServeSettings

    return load_served_pipeline(ServeSettings(source=str(tiny_weights), threads=1))


def post(url, payload, **kwargs):
    response = http_post(f"{url}/embed", json=payload, timeout=120, **kwargs)
    assert response.status_code == 200, response.text
    return response.json()["docs"]


def test_concurrent_clients_get_what_each_text_gets_alone(service, alone):
    requests = [{"texts": [text]} for text in TEXTS * 4] + [{"texts": TEXTS[:2], "tokens": "layers"}]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda payload: post(service, payload), requests))
    for payload, docs in zip(requests, answers, strict=True):
        assert len(docs) == len(payload["texts"]), f"{len(docs)} docs for {len(payload['texts'])} texts"
        for text, got in zip(payload["texts"], docs, strict=True):
            doc = alone(text)
            assert got["words"] == [token.text for token in doc]
            assert np.array_equal(np.array(got["vector"], dtype=np.float32), doc._.elmo)
            assert [(s["start"], s["end"]) for s in got["sentences"]] == [(s.start, s.end) for s in doc.sents]
            for sent, expected in zip(got["sentences"], doc.sents, strict=True):
                assert np.array_equal(np.array(sent["vector"], dtype=np.float32), expected._.elmo)
            if payload.get("tokens") == "layers":
                layers = np.array(got["layers"], dtype=np.float32)
                assert np.array_equal(layers, doc._.elmo_data.transpose(1, 0, 2))
            else:
                assert np.array_equal(np.array(got["vectors"], dtype=np.float32), np.stack([t._.elmo for t in doc]))


def test_words_and_float16_give_the_pipelines_numbers(service, alone):
    from spacy.tokens import Doc

    words = ["The", "cat", "sat", "."]
    got = post(service, {"words": [words], "dtype": "float16"})[0]
    doc = alone(Doc(alone.vocab, words=words))
    assert got["words"] == words
    expected = np.stack([t._.elmo for t in doc]).astype(np.float16)
    assert np.array_equal(np.array(got["vectors"], dtype=np.float32).astype(np.float16), expected)


def test_bad_input_gets_a_4xx_and_the_service_keeps_serving(service):
    for body, status, message in BAD_BODIES:
        response = http_post(f"{service}/embed", content=body, timeout=60)
        assert response.status_code == status and message in response.json()["error"], (message, response.text)
    assert http_get(f"{service}/embed", timeout=10).status_code == 405
    assert http_get(f"{service}/nowhere", timeout=10).status_code == 404
    assert post(service, {"texts": ["Still serving."]})[0]["words"] == ["Still", "serving", "."]


def exchange(service, pieces, pause=0.0, end_body=False):
    """Send ``pieces`` of raw bytes over one connection (``pause`` seconds apart; with ``end_body``
    the client then closes its side, as a client that sent all it had), then read until the service
    closes the connection. The status codes of the answers read, and how the exchange ended:
    "closed" (by the service) or "hung" (nothing more for 10 s, the connection still open)."""
    host, port = service.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        for piece in pieces:
            raw.sendall(piece)
            time.sleep(pause)
        if end_body:
            raw.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 120  # a hang guard: each answer is short, and then it closes
        try:
            while chunk := raw.recv(65536):
                received += chunk
                assert time.monotonic() < deadline, f"still sending after 120 s: {received[-2000:]!r}"
            ended = "closed"
        except socket.timeout:
            ended = "hung"
        except ConnectionResetError:
            ended = "closed"
    statuses = [int(line.split()[1]) for line in received.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
    return statuses, ended


def head(service, length, extra=""):
    host = service.removeprefix("http://")
    return f"POST /embed HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\n{extra}\r\n".encode()


def test_faults_of_http_itself_get_a_4xx_or_nothing_and_the_service_goes_on(service, alone):
    host, port = service.removeprefix("http://").split(":")
    body = json.dumps({"texts": [" ".join(["word"] * 400)] * 8}).encode()
    small = json.dumps({"texts": ["Slowly, word by word."]}).encode()
    for _ in range(3):
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(head(service, len(body)) + body[: len(body) // 2])  # half a body, then gone
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(head(service, len(body)) + body)  # a whole request, gone before its answer
    answers = {
        "shorter than declared": exchange(service, [head(service, len(small) + 50) + small], end_body=True),
        "longer than declared": exchange(service, [head(service, len(small) - 5) + small]),
        "length not a number": exchange(service, [head(service, "many") + small]),
        "length and chunked": exchange(service, [head(service, len(small), "Transfer-Encoding: chunked\r\n") + small]),
        "not HTTP": exchange(service, [b"HELLO THERE\r\n\r\n"]),
        "slow body": exchange(
            service,
            [head(service, len(small), "Connection: close\r\n")] + [small[i : i + 4] for i in range(0, len(small), 4)],
            0.05,
        ),
    }
    # a body cut short by a client that then closes cannot be answered: the service closes too
    assert answers == {
        "shorter than declared": ([], "closed"),
        **{name: ([400], "closed") for name in ("longer than declared", "length not a number", "length and chunked")},
        "not HTTP": ([400], "closed"),
        "slow body": ([200], "closed"),
    }, answers
    got = post(service, {"texts": [TEXTS[0]]})[0]
    assert np.array_equal(np.array(got["vector"], dtype=np.float32), alone(TEXTS[0])._.elmo)


def test_openais_client_gets_the_doc_vectors(service, alone):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{service}/v1", api_key="unused", max_retries=0)
    answer = client.embeddings.create(model="elmo", input=TEXTS[:3])  # the client asks for base64
    assert [item.index for item in answer.data] == [0, 1, 2] and answer.model == "elmo"
    for item, text in zip(answer.data, TEXTS[:3], strict=True):
        assert np.array_equal(np.array(item.embedding, dtype=np.float32), alone(text)._.elmo)
    assert answer.usage.prompt_tokens == sum(len(alone(text)) for text in TEXTS[:3])
    with pytest.raises(openai.UnprocessableEntityError, match="token ids"):
        client.embeddings.create(model="elmo", input=[[101, 102]])


def test_metadata_health_and_readiness(service, alone):
    about = http_get(f"{service}/metadata", timeout=10).json()
    bilm = alone.get_pipe("elmo").bilm
    assert about["elmo"]["layers"] == bilm.config.n_output_layers and about["elmo"]["width"] == bilm.config.output_dim
    assert about["elmo"]["precision"] == "fp32" and about["batching"]["on"] is True
    assert about["components"] == ["sentencizer", "elmo"] and about["api_key"] is False
    assert "spacy_elmo_requests_total" in http_get(f"{service}/metrics", timeout=10).text
    assert http_get(f"{service}/health", timeout=10).json() == {"status": "ok"}
    assert http_get(f"{service}/ready", timeout=10).json() == {"ready": True}


def test_the_api_document_and_its_page_are_served_without_a_key(service):
    """docs/serving.md's `curl .../openapi.json`: every route in it; /docs, the page that shows it."""
    from spacy_elmo.serving.gateway import ROUTES

    document = http_get(f"{service}/openapi.json", timeout=10).json()
    assert document["openapi"] == "3.1.0" and set(document["paths"]) == set(ROUTES), sorted(document["paths"])
    page = http_get(f"{service}/docs", timeout=10)
    assert page.status_code == 200 and "openapi.json" in page.text


def test_a_local_service_listens_on_loopback_only(served):
    """Every socket the service's processes listen on is on 127.0.0.1 (what it was asked for)."""
    pids = [served.process.pid, *session_processes(served.process.pid)]
    addresses = listening_addresses(pids)
    assert addresses, "the service listens somewhere"
    assert all(is_loopback(address) for address in addresses), addresses
    assert f"127.0.0.1:{served.url.rsplit(':', 1)[1]}" in addresses


def test_sigterm_answers_the_requests_in_flight_then_stops(served):
    """Last in this module: it stops the service."""
    answered = sigterm_with_requests_in_flight(served)
    assert served.ended() == 0
    assert [answer.status_code for answer in answered] == [200] * 6
    assert "every request in flight was answered" in served.output, served.output[-2000:]
    assert not session_processes(served.process.pid), "nothing of the service is left running"


def fewer_digits(written: str) -> list:
    """The two decimals of one significant digit fewer around ``written`` (none for one digit)."""
    from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

    number = Decimal(written).normalize()
    digits = len(number.as_tuple().digits)
    if digits <= 1 or number == 0:
        return []
    quantum = Decimal(1).scaleb(number.adjusted() - digits + 2)
    return [str(number.quantize(quantum, rounding=rounding)) for rounding in (ROUND_FLOOR, ROUND_CEILING)]


@pytest.mark.parametrize("tokens, per_token", [("mix", "vectors"), ("layers", "layers")])
def test_a_float16_answer_writes_each_number_in_float16s_shortest_form(alone, tokens, per_token):
    """docs/serving.md: a float16 answer's numbers read back as the same float16 as the float32
    answer's rounded, none could lose a digit and still do, and the answer is at most 70% of the
    float32 answer's bytes."""
    from spacy_elmo.serving.responses import embed_requests

    body = {"texts": TEXTS, "tokens": tokens}
    requests = [parse_request(json.dumps({**body, "dtype": d}).encode(), LIMITS) for d in ("float32", "float16")]
    (as_float32, as_float16), _ = embed_requests(alone, requests)
    assert len(as_float16) <= 0.7 * len(as_float32), (len(as_float16), len(as_float32))
    exact, written = json.loads(as_float32)["docs"], json.loads(as_float16, parse_float=str)["docs"]
    assert len(exact) == len(written) == len(TEXTS)
    checked = 0
    for want, got in zip(exact, written, strict=True):
        for key in ("vector", per_token):
            rounded = np.array(want[key], dtype=np.float32).astype(np.float16).ravel()
            texts = np.array(got[key], dtype=object).ravel()
            assert rounded.shape == texts.shape and rounded.size > 0
            for value, text in zip(rounded, texts, strict=True):
                assert np.float16(float(text)) == value, (text, value)
                assert all(np.float16(float(shorter)) != value for shorter in fewer_digits(text)), text
            checked += rounded.size
    assert checked > 1000


def test_weights_that_cannot_be_fetched_end_serve_with_the_fix_not_a_traceback(tmp_path, monkeypatch):
    """`serve` of weights it cannot download says what `download` says (where to place each file)
    and exits 1, as `download` and `embed` do, instead of a traceback of the loading."""
    from typer.testing import CliRunner

    import spacy_elmo.cli.serve  # noqa: F401  (registers the command)
    from spacy_elmo.cli.app import app

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the download is refused at once
    url = f"http://127.0.0.1:{port}/elmo/weights.hdf5"
    result = CliRunner().invoke(app, ["serve", url, "--port", "0"])
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), output
    assert "Cannot serve" in output and "Could not reach 1 file(s) of the model" in output, output
    assert url in output and "Place each file at its path" in output and "Traceback" not in output
