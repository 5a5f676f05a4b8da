"""`serve --engine ray` (the engine for more replicas or a cluster), started as a user starts it on
this machine: a replica killed under load costs no request, and SIGTERM under load drains it and
stops Ray with every process it started."""

import os
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from served_process import Served, samples_of, session_processes, sigterm_with_requests_in_flight, wait_for
from test_serve import TEXTS

pytest.importorskip("ray.serve", reason="the ray extra (pip install spacy-elmo[ray]) is not installed")


@pytest.fixture(scope="module")
def on_ray(tiny_weights):
    process = Served(tiny_weights, engine="ray")
    try:
        process.ready()
        yield process
    finally:
        process.stop()


# Heavy for the replica, light for the clients (doc vectors only): the replica is at work when it is
# killed. With every token's vectors in the answers, the 8 client threads of this process, parsing
# them, left the replica idle at times on a busy 2-core machine, and a kill then found no request to send again.
HEAVY_REQUEST = {"texts": [" ".join(TEXTS * 20)] * 4, "tokens": "none"}


def test_a_replica_killed_under_load_costs_no_request(on_ray):
    """SIGKILL to the replica while 8 clients keep it busy: every request is answered 200 (sent again
    to the replica Ray starts in its place) or 503 with Retry-After, none 5xx otherwise, none lost."""
    service = on_ray.url
    replica = httpx.get(f"{service}/metadata", timeout=10).json()["replica"]
    statuses, stop = [], threading.Event()
    deadline = time.monotonic() + 600  # a hang guard: the test stops its clients well before

    def client():
        while not stop.is_set():
            if time.monotonic() > deadline:
                statuses.append("a client still sending after 600 s")
                return
            try:
                answer = httpx.post(f"{service}/embed", json=HEAVY_REQUEST, timeout=120)
                refused_well = answer.status_code != 503 or answer.headers.get("Retry-After") == "1"
                statuses.append(answer.status_code if refused_well else "503 without Retry-After: 1")
            except httpx.HTTPError as lost:
                statuses.append(type(lost).__name__)

    with ThreadPoolExecutor(8) as pool:
        for _ in range(8):
            pool.submit(client)
        try:  # the clients stop however the waits end, or the pool's exit would wait for them forever
            answered = wait_for(lambda: len(statuses) >= 8, 120)
            assert answered, (
                f"8 answers before the kill within 120 s: {dict(Counter(statuses))}: {on_ray.output[-2000:]}"
            )
            os.kill(int(replica.rsplit(":", 1)[1]), signal.SIGKILL)
            before = len(statuses)
            back = wait_for(lambda: httpx.get(f"{service}/metadata", timeout=30).json()["replica"] != replica, 120)
            assert back, (
                f"no replica in place of {replica} within 120 s: {dict(Counter(statuses))}: {on_ray.output[-2000:]}"
            )
            answered = wait_for(lambda: len(statuses) >= before + 8, 120)
            assert answered, (
                f"8 answers after the kill within 120 s: {dict(Counter(statuses))}: {on_ray.output[-2000:]}"
            )
        finally:
            stop.set()
    counts = Counter(statuses)
    print(f"replica killed under 8 clients: {dict(counts)} over {len(statuses)} requests")
    assert set(counts) <= {200, 503}, counts
    assert 200 in statuses[before:], "the replica started in its place answers"
    metrics = httpx.get(f"{service}/metrics", timeout=10).text
    sent_again = samples_of(metrics, "spacy_elmo_replica_failures_total")
    print(f"requests sent again: {sent_again:.0f}")
    assert sent_again >= 1, "a request the killed replica held was sent again"
    assert samples_of(metrics, "spacy_elmo_replica_restarts_total") == 1


def test_sigterm_under_load_answers_the_requests_in_flight_and_stops_ray(on_ray):
    """Last in this module: it stops the service."""
    answered = sigterm_with_requests_in_flight(on_ray)
    assert on_ray.ended() == 0, on_ray.output[-3000:]
    assert [answer.status_code for answer in answered] == [200] * 6
    assert "every request in flight was answered" in on_ray.output, on_ray.output[-2000:]
    assert not session_processes(on_ray.process.pid), "Ray's processes were all stopped"
    assert "Ray's own processes listen on every interface of this machine" in " ".join(on_ray.output.split())
