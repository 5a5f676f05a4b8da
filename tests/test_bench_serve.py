"""bench/serve.py at a tiny size: the fixture model on the one-process engine, one route, rounds of
half a second. Without wrk (CI has none) the service's side of each cell is skipped and the
pipeline's side (1 and 2 connections: `nlp(text)` and `nlp.pipe`) is what the run measures; with
wrk, one cell of 2 connections, both sides (to stay within the test's time)."""

import shutil
import socket

from bench_runner import smoke

KEY = "serve:serve-cpu"
WITH_WRK = shutil.which("wrk") is not None
CLIENTS = ["2"] if WITH_WRK else ["1", "2"]
ARGUMENTS = ["--models", "fixture", "--engines", "process", "--routes", "/embed", "--clients", *CLIENTS]
ARGUMENTS += ["--seconds", "0.5", "--rounds", "1", "--warmup", "1", "--texts", "16", "--threads", "1"]
SERVE = smoke("serve", [("serve.py", *ARGUMENTS)], [("serve.py", "--render-only")])


def test_serve_beside_the_pipeline(bench_smokes):
    run = bench_smokes.outcome(SERVE)
    report = run.results("serve-cpu")
    assert "threads" in report["machine"] and report["device"] == "cpu"
    model = report["models"]["fixture"]
    assert model["words_per_sentence"] > 0
    assert [str(row["clients"]) for row in model["rows"]] == CLIENTS
    for row in model["rows"]:
        assert row["engine"] == "process" and row["startup_s"] > 0
        assert row["pipeline_sentences_per_s"] > 0
        if WITH_WRK:
            assert row["route"] == "/embed" and row["non_2xx"] == 0
            assert row["sentences_per_s"] > 0 and row["of_pipe"] > 0 and row["docs_per_batch"] > 0
        else:
            assert row["sentences_per_s"] is None
    (stdout,) = run.stdout
    if not WITH_WRK:
        assert model["rows"][0]["pipeline_p50_ms"] > 0
        assert "wrk is not installed" in stdout

    # the service listened on 127.0.0.1 only, and is gone
    url = next(line.split(" on ")[1].split()[0] for line in stdout.splitlines() if "stopped" in line)
    assert url.startswith("http://127.0.0.1:")
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", int(url.rsplit(":", 1)[1]))) != 0

    text = run.measured(KEY)
    assert report["machine"] in text and "python bench/serve.py --models fixture" in text
    assert run.is_png("serve-cpu")
    assert run.rendered(KEY) == text
