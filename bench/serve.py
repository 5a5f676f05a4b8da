"""`serve` under load against `nlp.pipe` in the same run. wrk (a load generator in C, Debian's `wrk`)
posts one real sentence a request, in turn through the same texts, with 1, 8 and 32 connections,
after a warm-up that has sent every text. Beside it, the same pipeline in a process of its own takes
the same texts: `nlp(text)` one at a time against one connection, `nlp.pipe` in batches of the
connection count against more. The two alternate in rounds of --seconds (service, pipeline,
pipeline, service, ...), so that a machine that speeds up or slows down during the run weighs on
both alike. Each engine (`process`, the one-replica default, and `ray`) serves each model: the
fixture model (tiny: what the service itself costs) and the full-size weights. Beside each cell: the
CPU time a request cost in each of the service's processes (from /proc), wrk's own, and the docs a
batch held.

    apt-get install wrk
    python bench/serve.py                                  # both models, both engines, 30-s cells
    python bench/serve.py --models fixture --seconds 5     # a quick look
    python bench/serve.py --device cuda --engines process  # the service and nlp.pipe on the GPU
    python bench/serve.py --breakdown --models fixture     # where a lone request's time goes (prints it)
    python bench/serve.py --render-only [--device cuda]    # the section again, from the results file

Needs: wrk for the service's side of each cell and for --breakdown (without it the pipeline's side
and the service's start-up are measured, the service's columns left empty); a CUDA GPU for --device
cuda; the full-size weights at bench/out/peer-full-bilm (`python bench/peer.py` converts the peer's).
The service listens on 127.0.0.1 only and is stopped at the end of each engine's cells. Writes
bench/results/serve-DEVICE.json and .png and the BENCHMARKS.md section "serve:serve-DEVICE".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from suite.report import (
    OUT,
    SHARED,
    command_line,
    cpu_description,
    figure_link,
    figure_path,
    machine,
    read_results,
    result_name,
    save_figure,
    shown_command,
    write_results,
    write_section,
)
from suite.timing import Timing, timed_for
from suite.workloads import FIXTURE, corpus_lines

MODELS = {"fixture": FIXTURE, "full": OUT / "peer-full-bilm"}
CLIENTS = [1, 8, 32]
ROUTES = ["/v1/embeddings", "/embed"]
HOST = "127.0.0.1"
WRK_DONE = """
done = function(summary, latency, requests)
  io.write(string.format('WRK {"requests": %d, "non_2xx": %d, "socket_errors": %d, "p50_us": %d, ' ..
    '"p90_us": %d, "p99_us": %d, "us": %d}\\n', summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), summary.duration))
end
"""
ROLES = [
    ("spacy-elmo:gateway", "Ray: gateway"),
    ("spacy-elmo:embedder", "Ray: replica"),
    ("ProxyActor", "Ray: HTTP proxy"),
    ("ServeController", "Ray: controller"),
    ("gcs_server", "Ray: GCS"),
    ("raylet", "Ray: raylet"),
    ("Agent", "Ray: agents"),
    ("spacy_elmo serve", "serve process"),
]


def sentences(count: int) -> List[str]:
    """The first ``count`` lines of 5 to 40 words of shared/data/corpus/valid.txt."""
    return [line.strip() for line in corpus_lines("valid.txt") if 5 <= len(line.split()) <= 40][:count]


# --- wrk ---------------------------------------------------------------------------------------


def request_body(route: str, text: str) -> str:
    return json.dumps({"input": text, "model": "elmo"} if route == "/v1/embeddings" else {"texts": [text]})


def lua_script(route: str, texts: List[str], folder: Path) -> Path:
    """A wrk script that posts ``texts`` to ``route`` in turn, one a request, and prints a JSON summary."""
    bodies = ",\n".join(f"[==[{request_body(route, text)}]==]" for text in texts)
    script = folder / f"{route.strip('/').replace('/', '-')}.lua"
    script.write_text(
        f"bodies = {{\n{bodies}\n}}\nsent = 0\n"
        "request = function()\n  sent = sent + 1\n"
        "  local body = bodies[(sent % #bodies) + 1]\n"
        f'  return wrk.format("POST", "{route}", {{["Content-Type"] = "application/json"}}, body)\n'
        "end\n" + WRK_DONE
    )
    return script


def run_wrk(url: str, script: Path, clients: int, seconds: float) -> dict:
    """wrk's summary of ``seconds`` of ``clients`` connections (one thread: it is not the bottleneck,
    its own CPU time is beside each cell), with its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = ["wrk", "-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--timeout", "120s", "-s", str(script)]
    done = subprocess.run([*command, url], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((row for row in done.stdout.splitlines() if row.startswith("WRK ")), None)
    if done.returncode or line is None:
        raise SystemExit(f"wrk failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    summary = json.loads(line[4:])
    summary["wrk_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return summary


def wrk_version() -> Optional[str]:
    """wrk's version, or None where it is not installed."""
    if shutil.which("wrk") is None:
        return None
    found = re.search(r"wrk (\S+)", subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout)
    return found.group(1) if found else "unknown"


# --- the pipeline alone, in a process of its own -----------------------------------------------


class Pipeline:
    """The pipeline the service runs, in a process of its own (as a replica has it), loaded once and
    warmed on every text, timed on request: ``nlp(text)`` one at a time, or ``nlp.pipe`` in batches."""

    def __init__(self, weights: Path, args) -> None:
        command = [sys.executable, __file__, "--in-process", str(weights), "--device", args.device]
        command += ["--threads", str(args.threads), "--texts", str(args.texts)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._about: Optional[dict] = None

    @property
    def about(self) -> dict:
        """What the process says once loaded and warm (it loads while the service starts)."""
        if self._about is None:
            self._about = self._answer()
        return self._about

    def time(self, batch: int, seconds: float) -> dict:
        """{"sentences_per_s", "p50_ms"} over ``seconds``: ``nlp(text)`` where ``batch`` is 1 (p50:
        a call's), else ``nlp.pipe`` over ``batch`` texts at a time (p50: None)."""
        self.process.stdin.write(json.dumps({"batch": batch, "seconds": seconds}) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the in-process pipeline ended (exit status {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def pipeline_process(weights: str, device: str, threads: int, count: int) -> None:
    """The other end of ``Pipeline``: load, warm, say the words a sentence, then answer each request
    line of stdin with one line of timings."""
    import torch

    from spacy_elmo.serving.embedder import load_served_pipeline
    from spacy_elmo.serving.settings import ServeSettings

    torch.set_num_threads(threads)
    nlp = load_served_pipeline(ServeSettings(source=weights, device=device, threads=threads))
    texts = sentences(count)
    list(nlp.pipe(texts, batch_size=max(CLIENTS)))  # every shape seen once
    words = sum(len(nlp.make_doc(text)) for text in texts) / len(texts)
    print(json.dumps({"words_per_sentence": words}), flush=True)
    for line in sys.stdin:
        asked = json.loads(line)
        timing = time_calls(nlp, texts, asked["seconds"], asked["batch"])
        figures = {"sentences_per_s": asked["batch"] * len(timing.runs_s) / sum(timing.runs_s)}
        figures["p50_ms"] = timing.median_s * 1000 if asked["batch"] == 1 else None
        print(json.dumps(figures), flush=True)


def time_calls(nlp, texts: List[str], seconds: float, batch: int) -> Timing:
    """The texts in turn for ``seconds``: each ``nlp(text)`` timed where ``batch`` is 1, else each
    ``nlp.pipe`` over the next ``batch`` texts (every batch full)."""
    endless = itertools.cycle(texts)
    if batch == 1:
        call = lambda: nlp(next(endless))
    else:
        call = lambda: list(nlp.pipe(itertools.islice(endless, batch), batch_size=batch))
    call()  # a warm-up: the shapes of this batch size met once
    return timed_for(call, seconds)


# --- the service -------------------------------------------------------------------------------


class Service:
    """`python -m spacy_elmo serve WEIGHTS --engine ENGINE` in a session of its own, on 127.0.0.1."""

    def __init__(self, weights: Path, engine: str, device: str, threads: int) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "spacy_elmo", "serve", str(weights), "--engine", engine, "--device", device]
        command += ["--threads", str(threads), "--host", HOST, "--port", str(self.port)]
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.perf_counter()
        self.url = f"http://{HOST}:{self.port}"

    def wait_ready(self, seconds: float = 600) -> float:
        """Seconds from the start until /ready answers 200 (a start-up, not a repeated call)."""
        import httpx

        while time.perf_counter() - self.started < seconds and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/ready", timeout=10).status_code == 200:
                    return time.perf_counter() - self.started
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.log.seek(0)
        raise SystemExit(f"serve did not become ready:\n{self.log.read().decode()[-3000:]}")

    def cpu_seconds(self) -> dict:
        """(what it is, CPU seconds so far) of each process in the service's session, by pid."""
        found: dict = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                command = (stat.parent / "cmdline").read_text().replace("\0", " ")
            except OSError:
                continue
            if int(fields[3]) == self.process.pid:
                seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
                found[stat.parent.name] = (process_role(command), seconds)
        return found

    def metrics(self) -> dict:
        """The service's /metrics, sample name to value."""
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}

    def batches(self) -> tuple:
        """(batches run, docs in them) so far."""
        found = self.metrics()
        return found.get("spacy_elmo_batch_docs_count", 0.0), found.get("spacy_elmo_batch_docs_sum", 0.0)

    def wait_idle(self, seconds: float = 120) -> None:
        """Until no request is in the service (what a cell's wrk left behind)."""
        deadline = time.perf_counter() + seconds
        while self.metrics().get("spacy_elmo_requests_in_service", 0.0) and time.perf_counter() < deadline:
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM (the requests in flight answered first), SIGKILL to its session after 2 minutes."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()


def process_role(command: str) -> str:
    return next((role for pattern, role in ROLES if pattern in command), "Ray: other")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --- a cell: the service and the pipeline in turn ----------------------------------------------


def measure_service(weights: Path, engine: str, args, scripts: Dict[str, Path], pipeline: Pipeline) -> List[dict]:
    """One row per route and client count of the service on ``engine``, the pipeline beside it
    (without wrk: the pipeline's side alone, one row per client count)."""
    service = Service(weights, engine, args.device, args.threads)
    try:
        words = pipeline.about["words_per_sentence"]
        startup = service.wait_ready()
        print(f"serve --engine {engine} ready on {service.url} after {startup:.1f} s", flush=True)
        for script in scripts.values():
            warm_up(service.url, script, max(args.clients), args)
        rows = []
        for route in scripts or [None]:
            if engine == "ray" and route not in (ROUTES[0], None):
                continue  # the routes differ in what the replica writes, measured on one engine
            for clients in args.clients:
                rows.append(paired_cell(service, pipeline, scripts.get(route), clients, args))
                rows[-1].update(engine=engine, route=route, startup_s=round(startup, 1))
                rows[-1]["words_per_s"] = round((rows[-1]["sentences_per_s"] or 0) * words, 1) or None
                print(json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        print(f"serve --engine {engine} on {service.url} stopped (exit status {service.stop()})", flush=True)


def warm_up(url: str, script: Path, clients: int, args) -> None:
    """--warmup seconds of wrk, longer where that did not send every text once at least."""
    warm = run_wrk(url, script, clients, args.warmup)
    if warm["requests"] < args.texts:
        run_wrk(url, script, clients, args.warmup * args.texts / max(warm["requests"], 1))


def paired_cell(service: Service, pipeline: Pipeline, script: Optional[Path], clients: int, args) -> dict:
    """--rounds rounds of the service under ``clients`` connections and the pipeline at a batch of
    ``clients``, alternating which goes first (no service rounds without a wrk script)."""
    served, alone = [], []
    for round_ in range(args.rounds):
        for side in ("service", "pipeline") if round_ % 2 == 0 else ("pipeline", "service"):
            if side == "pipeline":
                alone.append(pipeline.time(clients, args.seconds))
            elif script is not None:
                served.append(service_round(service, script, clients, args.seconds))
    return {**pipeline_figures(alone, clients), **service_figures(served, alone, clients)}


def service_round(service: Service, script: Path, clients: int, seconds: float) -> dict:
    service.wait_idle()
    before, batches_before = service.cpu_seconds(), service.batches()
    summary = run_wrk(service.url, script, clients, seconds)
    after, batches_after = service.cpu_seconds(), service.batches()
    summary["cpu"] = cpu_per_request(after, before, summary["requests"])
    summary["batches"] = [a - b for a, b in zip(batches_after, batches_before, strict=True)]
    return summary


def round_spread(rates: List[float]) -> float:
    """The spread of the rounds' time a sentence (0 for one round)."""
    return Timing(tuple(1 / rate for rate in rates)).spread


def pipeline_figures(alone: List[dict], clients: int) -> dict:
    rates = [a["sentences_per_s"] for a in alone]
    row = {
        "clients": clients,
        "rounds": len(alone),
        "pipeline_sentences_per_s": round(sum(rates) / len(rates), 2),
        "pipeline_spread": round(round_spread(rates), 3),
    }
    if clients == 1:
        row["pipeline_p50_ms"] = round(float(median([a["p50_ms"] for a in alone])), 2)
    return row


def service_figures(served: List[dict], alone: List[dict], clients: int) -> dict:
    """What the service's rounds add up to: throughput over all of them, the medians of the rounds'
    p50s, the median of the rounds' differences from the pipeline (all None without rounds)."""
    if not served:
        return {"sentences_per_s": None}
    requests, seconds = sum(s["requests"] for s in served), sum(s["us"] for s in served) / 1e6
    rate = requests / seconds
    pipe_rate = sum(a["sentences_per_s"] for a in alone) / len(alone)
    batches, docs = (sum(s["batches"][i] for s in served) for i in (0, 1))
    row = {
        "requests": requests,
        "seconds": round(seconds, 1),
        "sentences_per_s": round(rate, 2),
        "spread": round(round_spread([s["requests"] / s["us"] * 1e6 for s in served]), 3),
        "of_pipe": round(rate / pipe_rate, 3),
        "p50_ms": round(median([s["p50_us"] / 1000 for s in served]), 2),
        "p99_ms": round(median([s["p99_us"] / 1000 for s in served]), 2),
        "non_2xx": sum(s["non_2xx"] for s in served),
        "socket_errors": sum(s["socket_errors"] for s in served),
        "docs_per_batch": round(docs / batches, 2) if batches else None,
        "cpu_ms_per_request": mean_of_dicts([s["cpu"] for s in served]),
        "wrk_cpu_ms_per_request": round(sum(s["wrk_cpu_s"] for s in served) * 1000 / max(requests, 1), 3),
    }
    if clients == 1:
        above = [s["p50_us"] / 1000 - a["p50_ms"] for s, a in zip(served, alone, strict=True)]
        row["p50_above_nlp_ms"] = round(median(above), 2)
    return row


def median(values: List[float]) -> float:
    import statistics

    return float(statistics.median(values))


def mean_of_dicts(dicts: List[dict]) -> dict:
    keys = dict.fromkeys(key for d in dicts for key in d)
    means = {key: round(sum(d.get(key, 0.0) for d in dicts) / len(dicts), 3) for key in keys}
    return {key: value for key, value in sorted(means.items(), key=lambda kv: -kv[1]) if value}


def cpu_per_request(after: dict, before: dict, requests: int) -> dict:
    """CPU ms a request of each role, from two ``Service.cpu_seconds`` readings."""
    cpu: dict = {}
    for pid, (role, spent) in after.items():
        cpu[role] = cpu.get(role, 0.0) + (spent - before.get(pid, (role, 0.0))[1]) * 1000 / max(requests, 1)
    return cpu


# --- where a lone request's time goes ----------------------------------------------------------


def clock_the_steps(marks: Dict[str, list]) -> None:
    """Patch the one-process engine's gateway and batch with a clock at each step: after each
    request, each step's ms from the gateway's entry is appended to ``marks[step]``."""
    from spacy_elmo.serving import embedder, gateway

    current: Dict[str, float] = {}

    def clocked(step, call):
        def wrapper(*arguments, **options):
            current[f"{step} starts"] = time.perf_counter()
            try:
                return call(*arguments, **options)
            finally:
                current[f"{step} ends"] = time.perf_counter()

        return wrapper

    asgi = gateway.Gateway.asgi
    embedder.embed_requests = clocked("the batch", embedder.embed_requests)

    async def traced(self, scope, receive, send):
        entered = time.perf_counter()

        async def sending(message):
            if message["type"] == "http.response.body":
                current["answer sent"] = time.perf_counter()
            await send(message)

        await asgi(self, scope, receive, sending)
        for step, at in current.items():
            marks.setdefault(step, []).append((at - entered) * 1000)

    gateway.Gateway.asgi = traced


def breakdown(weights: Path, args) -> dict:
    """Where a lone request's time goes in the one-process service: the engine runs here with a
    clock at each step (the gateway's entry, the handoff to the replica's thread, the batch, the way
    back, the answer sent) while wrk sends one request at a time for --seconds; the medians, in ms
    from the gateway's entry, and wrk's p50 (what the client saw)."""
    import threading

    from spacy_elmo.serving.process_engine import ProcessEngine
    from spacy_elmo.serving.settings import ServeSettings

    marks: Dict[str, list] = {}
    clock_the_steps(marks)
    settings = ServeSettings(source=str(weights), device=args.device, threads=args.threads, host=HOST, port=0)
    engine = ProcessEngine(settings)
    engine.start()
    found: dict = {}

    def load() -> None:
        with tempfile.TemporaryDirectory() as folder:
            script = lua_script(ROUTES[0], sentences(args.texts), Path(folder))
            warm_up(engine.url, script, 1, args)
            marks.clear()
            found["wrk"] = run_wrk(engine.url, script, 1, args.seconds)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=load, daemon=True).start()
    engine.serve(60, lambda left: None)
    engine.stop()
    steps = {step: round(median(values), 3) for step, values in marks.items()}
    return {
        "steps_ms": dict(sorted(steps.items(), key=lambda kv: kv[1])),
        "client_p50_ms": found["wrk"]["p50_us"] / 1000,
    }


# --- the report --------------------------------------------------------------------------------


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(report["models"])
    fig, axes = plt.subplots(len(models), 2, figsize=(11, 3.8 * len(models)), squeeze=False)
    for (left, right), name in zip(axes, models, strict=True):
        rows = report["models"][name]["rows"]
        for engine, route in dict.fromkeys((r["engine"], r["route"]) for r in rows if r.get("sentences_per_s")):
            cell = [r for r in rows if (r["engine"], r["route"]) == (engine, route)]
            label = f"serve --engine {engine}, {route}"
            left.plot([r["clients"] for r in cell], [r["of_pipe"] for r in cell], marker="o", label=label)
            right.plot([r["clients"] for r in cell], [r["p50_ms"] for r in cell], marker="o", label=label)
        lone = [r for r in rows if r["clients"] == 1]
        if lone:
            right.axhline(lone[0]["pipeline_p50_ms"], color="k", linestyle="--", label="nlp(text), p50")
        left.axhline(1.0, color="k", linestyle="--", label="nlp.pipe, batch = connections")
        left.set(xlabel="connections", ylabel="sentences/s, of nlp.pipe's", xscale="log", title=f"{name} model")
        right.set(xlabel="connections", ylabel="p50 latency (ms)", xscale="log", yscale="log", title="p50 latency")
        left.legend(fontsize=7)
        right.legend(fontsize=7)
    fig.suptitle(f"serve under wrk, {report['device']}, {report['machine']}", fontsize=8)
    save_figure(fig, path, dpi=110)


def markdown(report: dict, name: str) -> List[str]:
    wrk = f"wrk {report['wrk']} (one thread)" if report.get("wrk") else "wrk absent (the service's columns empty)"
    lines = [
        f"### `serve` under load against `nlp.pipe` in the same run ({report['date']})",
        "",
        f"Machine: {report['machine']}; device {report['device']}; {report['threads']} torch threads; {wrk}, one "
        f"sentence of shared/data/corpus/valid.txt a request, {report['texts']} texts in turn, after a warm-up that "
        f"sent every text. Each cell: {report['rounds']} rounds of {report['seconds']:.0f} s of the service, "
        "alternating with as many of the pipeline in a process of its own (`nlp(text)` for one connection, "
        "`nlp.pipe(texts, batch_size=connections)` for more). "
        f"Command: `{shown_command(report['command'])}`. of pipe: the "
        "service's sentences/s over the pipeline's; above nlp: the median of the rounds' p50 minus `nlp(text)`'s "
        "p50; ± the spread of the rounds (slowest - fastest, over the median), where the run kept it.",
    ]
    for model_name, model in report["models"].items():
        lines += [
            "",
            f"**{model_name} model** ({model['weights']}, {model['words_per_sentence']:.1f} words a sentence)",
            "",
            "| engine | route | connections | sentences/s | pipeline | of pipe | p50 ms | above nlp | p99 ms | "
            "docs a batch | non-2xx | CPU ms a request (service; wrk) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        lines += [table_row(row) for row in model["rows"]]
    return lines + ["", figure_link(name), ""]


def with_spread(value: Optional[float], spread: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" + (f" ± {spread:.0%}" if spread else "")


def table_row(r: dict) -> str:
    pipeline = with_spread(r["pipeline_sentences_per_s"], r.get("pipeline_spread"))
    route = f"`{r['route']}`" if r.get("route") else "-"
    if not r.get("sentences_per_s"):
        return f"| {r['engine']} | {route} | {r['clients']} | - | {pipeline} | - | - | - | - | - | - | - |"
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_ms_per_request"].items())
    above = f"{r['p50_above_nlp_ms']:+.1f}" if "p50_above_nlp_ms" in r else "-"
    return (
        f"| {r['engine']} | {route} | {r['clients']} | {with_spread(r['sentences_per_s'], r.get('spread'))} | "
        f"{pipeline} | {r['of_pipe']:.2f}x | {r['p50_ms']:,.1f} | {above} | {r['p99_ms']:,.1f} | "
        f"{r['docs_per_batch'] or '-'} | {r['non_2xx'] + r['socket_errors']} | "
        f"{cpu}; wrk {r['wrk_cpu_ms_per_request']:.2f} |"
    )


def legacy_markdown(report: dict, name: str) -> List[str]:
    """The section of a results file an earlier bench_serve.py wrote (a table of rows by device,
    before the pipeline was measured beside the service): kept as it was measured."""
    gpu = report.get("gpu", {})
    lines = [
        f"### `serve` on a GPU: replicas on the GPU against the CPU ({report['date']})",
        "",
        f"GPU: {gpu.get('gpu', '?')}, driver {gpu.get('driver', '?')}, torch {gpu.get('torch', '?')}, CUDA "
        f"{gpu.get('cuda', '?')}; CPU: {report['machine']}; {report['threads']} torch threads; full-size weights; "
        f"each request one sentence of shared/data/corpus/valid.txt; each cell at most {report['max_requests']} "
        f"requests or {report['seconds']} s. Measured by an earlier version of this script (`{report['command']}`, "
        "options since removed); `python bench/serve.py --device cuda --engines process` measures the service "
        "against `nlp.pipe` on the GPU now. device: where the replicas' biLM ran.",
        "",
        "| device | engine | batching | clients | requests | words/s | p50 ms | p99 ms | start (s) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['bilm_device']} | {r['engine']} | {'on' if r['batching'] else 'off'} | {r['concurrency']} | "
            f"{r['requests']} | {r['words_per_s']:,.0f} | {r['p50_ms']:,.0f} | {r['p99_ms']:,.0f} | "
            f"{r['startup_s']:.1f} |"
        )
    return lines + ["", figure_link(name), ""]


def legacy_plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for device in dict.fromkeys(r["bilm_device"] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["bilm_device"] == device]
        left.plot([r["concurrency"] for r in rows], [r["words_per_s"] for r in rows], marker="o", label=device)
        right.plot([r["concurrency"] for r in rows], [r["p50_ms"] for r in rows], marker="o", label=device)
    left.set(xlabel="clients", ylabel="words/s", xscale="log", title="throughput")
    right.set(xlabel="clients", ylabel="p50 latency (ms)", xscale="log", yscale="log", title="p50 latency")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.suptitle(f"serve on Ray, {report.get('gpu', {}).get('gpu', report['device'])}", fontsize=8)
    save_figure(fig, path, dpi=110)


def render(report: dict, name: str) -> None:
    """The plot and the BENCHMARKS.md section of a report (an earlier script's layout too)."""
    legacy = "models" not in report
    (legacy_plot if legacy else plot)(report, figure_path(name))
    write_section(f"serve:{name}", (legacy_markdown if legacy else markdown)(report, name))


def new_report(args) -> dict:
    report = {
        "machine": machine(args.threads, args.device),
        "device": args.device,
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line("serve.py"),
        "threads": args.threads,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "texts": len(sentences(args.texts)),
        "wrk": wrk_version(),
        "models": {},
    }
    if args.device == "cuda":
        report["cpu"] = cpu_description()
    return report


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--engines", nargs="+", default=["process", "ray"], choices=["process", "ray"])
    parser.add_argument("--routes", nargs="+", default=ROUTES, choices=ROUTES)
    parser.add_argument("--clients", nargs="+", type=int, default=CLIENTS)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--seconds", type=float, default=30.0, help="each round of the service, and of the pipeline")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each side a cell")
    parser.add_argument("--warmup", type=float, default=10.0, help="wrk at the most connections, per route")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--texts", type=int, default=200, help="sentences sent in turn (and warmed on)")
    parser.add_argument("--breakdown", action="store_true", help="where a lone request's time goes (one process)")
    parser.add_argument("--render-only", action="store_true", help="the section and plot again from the results")
    parser.add_argument("--in-process", help=argparse.SUPPRESS)
    return parser.parse_args()


def weights_of(name: str) -> Path:
    weights = MODELS[name]
    if not weights.is_dir():
        raise SystemExit(f"No {name} weights at {weights} (full-size: `python bench/peer.py` converts the peer's)")
    return weights


def measure(args, name: str) -> None:
    version = wrk_version()
    if version is None:
        print("wrk is not installed (apt-get install wrk): the service's side of each cell is skipped", flush=True)
    report = new_report(args)
    with tempfile.TemporaryDirectory() as folder:
        scripts = (
            {route: lua_script(route, sentences(args.texts), Path(folder)) for route in args.routes} if version else {}
        )
        for model_name in args.models:
            weights = weights_of(model_name)
            pipeline = Pipeline(weights, args)
            shown = str(weights.relative_to(SHARED.parent) if SHARED.parent in weights.parents else weights)
            model = report["models"][model_name] = {"weights": shown, "rows": []}
            try:
                for engine in args.engines:  # the outputs written after each: a run cut short keeps them
                    model["rows"] += measure_service(weights, engine, args, scripts, pipeline)
                    model.update(pipeline.about)
                    write_results(name, report)
                    render(report, name)
            finally:
                pipeline.close()


def main() -> None:
    args = parse_arguments()
    name = result_name(f"serve-{args.device}")
    if args.in_process:
        pipeline_process(args.in_process, args.device, args.threads, args.texts)
    elif args.render_only:
        render(read_results(name), name)
    elif args.breakdown:
        if wrk_version() is None:
            raise SystemExit("--breakdown needs wrk, a load generator in C: apt-get install wrk")
        for model_name in args.models:
            print(model_name, json.dumps(breakdown(weights_of(model_name), args)), flush=True)
    else:
        measure(args, name)


if __name__ == "__main__":
    main()
