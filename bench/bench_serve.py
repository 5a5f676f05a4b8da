"""`serve` under load, measured as servers are: wrk (a load generator in C, from Debian's `wrk`)
posts one real sentence a request, in turn through the same texts, with 1, 8 and 32 connections,
after a warm-up that has sent every text. Beside it, in the same run, the same pipeline in a process
of its own takes the same texts: `nlp(text)` one at a time against one connection, `nlp.pipe` in
batches of the connection count against more. The two alternate in rounds of --seconds (service,
pipeline, pipeline, service, ...), so that a machine that speeds up or slows down during the run
weighs on both alike. Each engine (`--engine process`, the default for one replica, and `--engine
ray`) serves each model: the fixture model (tiny: what the service itself costs) and the full-size
weights. Beside each cell: the CPU time a request cost in each of the service's processes (from
/proc), wrk's own, and the docs a batch held.

    apt-get install wrk
    python bench/bench_serve.py                                  # both models, both engines, 30-s cells
    python bench/bench_serve.py --models fixture --seconds 5     # a quick look
    python bench/bench_serve.py --device cuda --engines process  # the service and nlp.pipe on the GPU
    python bench/bench_serve.py --breakdown --models fixture     # where a lone request's time goes

The full-size weights are bench/out/peer-full-bilm (bench_peer.py converts the peer's). Writes
bench/results/serve-DEVICE.json and .png and the section of BENCHMARKS.md.
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

import numpy as np
from report import ROOT, SHARED, write_section

RESULTS = ROOT / "bench" / "results"
MODELS = {"fixture": SHARED / "fixtures" / "elmo-allennlp", "full": ROOT / "bench" / "out" / "peer-full-bilm"}
CLIENTS = [1, 8, 32]
ROUTES = ["/v1/embeddings", "/embed"]
WRK_DONE = """
done = function(summary, latency, requests)
  io.write(string.format('WRK {"requests": %d, "non_2xx": %d, "socket_errors": %d, "p50_us": %d, ' ..
    '"p90_us": %d, "p99_us": %d, "us": %d}\\n', summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), summary.duration))
end
"""


def sentences(count: int = 200) -> list:
    """The first ``count`` lines of 5 to 40 words of shared/data/corpus/valid.txt."""
    text = (SHARED / "data" / "corpus" / "valid.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if 5 <= len(line.split()) <= 40][:count]


def request_body(route: str, text: str) -> str:
    return json.dumps({"input": text, "model": "elmo"} if route == "/v1/embeddings" else {"texts": [text]})


def lua_script(route: str, texts: list, folder: Path) -> Path:
    """A wrk script that posts ``texts`` to ``route`` in turn, one a request, and prints a JSON summary."""
    bodies = ",\n".join(f"[==[{request_body(route, text)}]==]" for text in texts)
    script = folder / f"{route.strip('/').replace('/', '-')}.lua"
    script.write_text(
        f"bodies = {{\n{bodies}\n}}\nsent = 0\n"
        "request = function()\n  sent = sent + 1\n"
        f"  local body = bodies[(sent % #bodies) + 1]\n"
        f'  return wrk.format("POST", "{route}", {{["Content-Type"] = "application/json"}}, body)\n'
        "end\n" + WRK_DONE
    )
    return script


def run_wrk(url: str, script: Path, clients: int, seconds: float) -> dict:
    """wrk's summary of ``seconds`` of ``clients`` connections (one thread: it is not the bottleneck,
    its own CPU time is beside each cell), with its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = ["wrk", "-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--timeout", "120s", "-s", str(script)]
    command.append(url)
    done = subprocess.run(command, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((row for row in done.stdout.splitlines() if row.startswith("WRK ")), None)
    if done.returncode or line is None:
        raise SystemExit(f"wrk failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    summary = json.loads(line[4:])
    summary["wrk_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return summary


class Pipeline:
    """The pipeline the service runs, in a process of its own (as a replica has it), loaded once and
    warmed on every text, timed on request: ``nlp(text)`` one at a time, or ``nlp.pipe`` in batches."""

    def __init__(self, weights: Path, device: str, threads: int) -> None:
        command = [sys.executable, __file__, "--in-process", str(weights), "--device", device]
        command += ["--threads", str(threads)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.about = self._answer()

    def time(self, batch: int, seconds: float) -> dict:
        """{"sentences_per_s", "p50_ms"}: ``nlp(text)`` over the texts in turn for ``seconds`` where
        ``batch`` is 1 (p50: each call's), ``nlp.pipe(texts, batch_size=batch)`` otherwise."""
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


def serve_timings(weights: str, device: str, threads: int) -> None:
    """The other end of ``Pipeline``: load, warm, say the words a sentence, then answer each request
    line of stdin with one line of timings."""
    import torch

    from spacy_elmo.serving.embedder import load_served_pipeline
    from spacy_elmo.serving.settings import ServeSettings

    torch.set_num_threads(threads)
    nlp = load_served_pipeline(ServeSettings(source=weights, device=device, threads=threads))
    texts = sentences()
    list(nlp.pipe(texts, batch_size=max(CLIENTS)))  # every shape seen once
    print(json.dumps({"words_per_sentence": float(np.mean([len(nlp.make_doc(t)) for t in texts]))}), flush=True)
    for line in sys.stdin:
        asked = json.loads(line)
        timed = time_calls(nlp, texts, asked["seconds"]) if asked["batch"] == 1 else time_pipe(nlp, texts, **asked)
        print(json.dumps(timed), flush=True)


def time_calls(nlp, texts: list, seconds: float) -> dict:
    latencies, started = [], time.perf_counter()
    while time.perf_counter() - started < seconds:
        text = texts[len(latencies) % len(texts)]
        call = time.perf_counter()
        nlp(text)
        latencies.append(time.perf_counter() - call)
    elapsed = time.perf_counter() - started
    return {"sentences_per_s": len(latencies) / elapsed, "p50_ms": float(np.percentile(latencies, 50) * 1000)}


def time_pipe(nlp, texts: list, batch: int, seconds: float) -> dict:
    """``nlp.pipe`` over the texts in turn, without end (every batch full), for ``seconds``."""
    done, started = 0, time.perf_counter()
    for _ in nlp.pipe(itertools.cycle(texts), batch_size=batch):
        done += 1
        if done % batch == 0 and time.perf_counter() - started >= seconds:
            break
    return {"sentences_per_s": done / (time.perf_counter() - started), "p50_ms": None}


class Service:
    """`python -m spacy_elmo serve WEIGHTS --engine ENGINE` in a session of its own, on 127.0.0.1."""

    def __init__(self, weights: Path, engine: str, device: str, threads: int) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "spacy_elmo", "serve", str(weights), "--engine", engine]
        command += ["--device", device, "--threads", str(threads), "--port", str(self.port)]
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, seconds: float = 600) -> float:
        """Seconds from the start until /ready answers 200."""
        import httpx

        started = time.perf_counter()
        while time.perf_counter() - started < seconds and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/ready", timeout=10).status_code == 200:
                    return time.perf_counter() - started
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

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


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


def process_role(command: str) -> str:
    return next((role for pattern, role in ROLES if pattern in command), "Ray: other")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_service(weights: Path, engine: str, args, scripts: dict, pipeline: Pipeline) -> list:
    """One row per route and client count of the service on ``engine``, the pipeline beside it."""
    service = Service(weights, engine, args.device, args.threads)
    words = pipeline.about["words_per_sentence"]
    try:
        startup = service.wait_ready()
        for script in scripts.values():  # every text of every route sent once at least
            warm = run_wrk(service.url, script, max(args.clients), args.warmup)
            if warm["requests"] < len(sentences()):
                run_wrk(service.url, script, max(args.clients), args.warmup * len(sentences()) / warm["requests"])
        rows = []
        for route, script in scripts.items():
            if engine == "ray" and route != ROUTES[0]:
                continue  # the routes differ in what the replica writes, measured on one engine
            for clients in args.clients:
                rows.append(paired_cell(service, pipeline, script, clients, args))
                rows[-1].update(engine=engine, route=route, startup_s=round(startup, 1))
                rows[-1]["words_per_s"] = round(rows[-1]["sentences_per_s"] * words, 1)
                print(json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        service.stop()


def paired_cell(service: "Service", pipeline: Pipeline, script: Path, clients: int, args) -> dict:
    """--rounds rounds of the service under ``clients`` connections and the pipeline at a batch of
    ``clients``, alternating which goes first."""
    served, alone = [], []
    for round_ in range(args.rounds):
        for side in ("service", "pipeline") if round_ % 2 == 0 else ("pipeline", "service"):
            if side == "pipeline":
                alone.append(pipeline.time(clients, args.seconds))
                continue
            service.wait_idle()
            before, batches_before = service.cpu_seconds(), service.batches()
            summary = run_wrk(service.url, script, clients, args.seconds)
            after, batches_after = service.cpu_seconds(), service.batches()
            summary["cpu"] = cpu_per_request(after, before, summary["requests"])
            summary["batches"] = [a - b for a, b in zip(batches_after, batches_before)]
            served.append(summary)
    return cell_row(served, alone, clients)


def cell_row(served: list, alone: list, clients: int) -> dict:
    """What the rounds of one cell add up to: throughput over all of them, the medians of the
    rounds' p50s, the median of the rounds' differences from the pipeline."""
    requests, seconds = sum(s["requests"] for s in served), sum(s["us"] for s in served) / 1e6
    rate = requests / seconds
    pipe_rate = float(np.mean([a["sentences_per_s"] for a in alone]))
    batches, docs = (sum(s["batches"][i] for s in served) for i in (0, 1))
    row = {
        "clients": clients,
        "rounds": len(served),
        "requests": requests,
        "seconds": round(seconds, 1),
        "sentences_per_s": round(rate, 2),
        "pipeline_sentences_per_s": round(pipe_rate, 2),
        "of_pipe": round(rate / pipe_rate, 3),
        "p50_ms": round(float(np.median([s["p50_us"] / 1000 for s in served])), 2),
        "p99_ms": round(float(np.median([s["p99_us"] / 1000 for s in served])), 2),
        "non_2xx": sum(s["non_2xx"] for s in served),
        "socket_errors": sum(s["socket_errors"] for s in served),
        "docs_per_batch": round(docs / batches, 2) if batches else None,
        "cpu_ms_per_request": mean_of_dicts([s["cpu"] for s in served]),
        "wrk_cpu_ms_per_request": round(sum(s["wrk_cpu_s"] for s in served) * 1000 / max(requests, 1), 3),
    }
    if clients == 1:
        row["pipeline_p50_ms"] = round(float(np.median([a["p50_ms"] for a in alone])), 2)
        row["p50_above_nlp_ms"] = round(
            float(np.median([s["p50_us"] / 1000 - a["p50_ms"] for s, a in zip(served, alone)])), 2
        )
    return row


def mean_of_dicts(dicts: list) -> dict:
    keys = dict.fromkeys(key for d in dicts for key in d)
    means = {key: round(float(np.mean([d.get(key, 0.0) for d in dicts])), 3) for key in keys}
    return {key: value for key, value in sorted(means.items(), key=lambda kv: -kv[1]) if value}


def cpu_per_request(after: dict, before: dict, requests: int) -> dict:
    """CPU ms a request of each role, from two ``Service.cpu_seconds`` readings."""
    cpu: dict = {}
    for pid, (role, spent) in after.items():
        cpu[role] = cpu.get(role, 0.0) + (spent - before.get(pid, (role, 0.0))[1]) * 1000 / max(requests, 1)
    return cpu


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(report["models"])
    fig, axes = plt.subplots(len(models), 2, figsize=(11, 3.8 * len(models)), squeeze=False)
    for (left, right), name in zip(axes, models):
        rows = report["models"][name]["rows"]
        for engine, route in dict.fromkeys((r["engine"], r["route"]) for r in rows):
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(report: dict) -> list:
    lines = [
        f"### `serve` under load against `nlp.pipe` in the same run ({report['date']})",
        "",
        f"Machine: {report['machine']}; device {report['device']}; {report['threads']} torch threads; wrk "
        f"{report['wrk']} (one thread), one sentence of shared/data/corpus/valid.txt a request, {report['texts']} "
        f"texts in turn, after a warm-up that sent every text. Each cell: {report['rounds']} rounds of "
        f"{report['seconds']:.0f} s of the service, alternating with as many of the pipeline in a process of its "
        f"own (`nlp(text)` for one connection, `nlp.pipe(texts, batch_size=connections)` for more). Command: "
        f"`{report['command']}`. of pipe: the service's sentences/s over the pipeline's; above nlp: the median of "
        "the rounds' p50 minus `nlp(text)`'s p50.",
    ]
    for name, model in report["models"].items():
        lines += [
            "",
            f"**{name} model** ({model['weights']}, {model['words_per_sentence']:.1f} words a sentence)",
            "",
            "| engine | route | connections | sentences/s | pipeline | of pipe | p50 ms | above nlp | p99 ms | "
            "docs a batch | non-2xx | CPU ms a request (service; wrk) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in model["rows"]:
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_ms_per_request"].items())
            above = f"{r['p50_above_nlp_ms']:+.1f}" if "p50_above_nlp_ms" in r else "-"
            lines.append(
                f"| {r['engine']} | `{r['route']}` | {r['clients']} | {r['sentences_per_s']:,.1f} | "
                f"{r['pipeline_sentences_per_s']:,.1f} | {r['of_pipe']:.2f}x | {r['p50_ms']:,.1f} | {above} | "
                f"{r['p99_ms']:,.1f} | {r['docs_per_batch'] or '-'} | {r['non_2xx'] + r['socket_errors']} | "
                f"{cpu}; wrk {r['wrk_cpu_ms_per_request']:.2f} |"
            )
    name = f"serve-{report['device']}"
    return lines + ["", f"![serve under load](bench/results/{name}.png)", ""]


def write_outputs(report: dict) -> None:
    from spacy_elmo.files import atomic_write_json

    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"serve-{report['device']}"
    atomic_write_json(RESULTS / f"{name}.json", report)
    plot(report, RESULTS / f"{name}.png")
    write_section(f"bench_serve:{report['device']}", markdown(report))


def new_report(args) -> dict:
    from spacy_elmo.kernels.machine import cpu_description

    version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout
    found = re.search(r"wrk (\S+)", version)
    report = {
        "machine": cpu_description(),
        "device": args.device,
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python bench/bench_serve.py", *sys.argv[1:]]),
        "threads": args.threads,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "texts": len(sentences()),
        "wrk": found.group(1) if found else "unknown",
        "models": {},
    }
    if args.device == "cuda":
        from bench_gpu import device_description

        report["gpu"] = device_description()
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
    parser.add_argument("--breakdown", action="store_true", help="where a lone request's time goes (one process)")
    parser.add_argument("--in-process", help=argparse.SUPPRESS)
    return parser.parse_args()


def breakdown(weights: Path, args) -> dict:
    """Where a lone request's time goes in the one-process service: the engine runs here with a
    clock at each step (the gateway's entry, the handoff to the replica's thread, the batch, the way
    back, the answer sent) while wrk sends one request at a time for --seconds; the medians, in ms
    from the gateway's entry, and wrk's p50 (what the client saw)."""
    import threading

    from spacy_elmo.serving import embedder, gateway
    from spacy_elmo.serving.process_engine import ProcessEngine
    from spacy_elmo.serving.settings import ServeSettings

    marks: dict = {}
    current: dict = {}

    def timed(step, call):
        def wrapper(*arguments, **options):
            current[f"{step} starts"] = time.perf_counter()
            try:
                return call(*arguments, **options)
            finally:
                current[f"{step} ends"] = time.perf_counter()

        return wrapper

    run_batch, asgi = embedder.embed_requests, gateway.Gateway.asgi
    embedder.embed_requests = timed("the batch", run_batch)

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
    engine = ProcessEngine(ServeSettings(source=str(weights), device=args.device, threads=args.threads, port=0))
    engine.start()
    found: dict = {}

    def load() -> None:
        with tempfile.TemporaryDirectory() as folder:
            script = lua_script(ROUTES[0], sentences(), Path(folder))
            run_wrk(engine.url, script, 1, args.warmup)
            marks.clear()
            found["wrk"] = run_wrk(engine.url, script, 1, args.seconds)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=load, daemon=True).start()
    engine.serve(60, lambda left: None)
    engine.stop()
    steps = {step: round(float(np.median(values)), 3) for step, values in marks.items()}
    return {
        "steps_ms": dict(sorted(steps.items(), key=lambda kv: kv[1])),
        "client_p50_ms": found["wrk"]["p50_us"] / 1000,
    }


def main() -> None:
    args = parse_arguments()
    if args.in_process:
        serve_timings(args.in_process, args.device, args.threads)
        return
    if args.breakdown:
        for name in args.models:
            print(name, json.dumps(breakdown(MODELS[name], args)), flush=True)
        return
    if shutil.which("wrk") is None:
        raise SystemExit("bench_serve.py needs wrk, a load generator in C: apt-get install wrk")
    report = new_report(args)
    with tempfile.TemporaryDirectory() as folder:
        scripts = {route: lua_script(route, sentences(), Path(folder)) for route in args.routes}
        for name in args.models:
            weights = MODELS[name]
            if not weights.is_dir():
                raise SystemExit(f"No {name} weights at {weights} (full-size: bench_peer.py converts the peer's)")
            pipeline = Pipeline(weights, args.device, args.threads)
            shown = str(weights.relative_to(SHARED.parent) if SHARED.parent in weights.parents else weights)
            model = report["models"][name] = {"weights": shown, "rows": [], **pipeline.about}
            try:
                for engine in args.engines:  # the outputs written after each: a run cut short keeps them
                    model["rows"] += measure_service(weights, engine, args, scripts, pipeline)
                    write_outputs(report)
            finally:
                pipeline.close()


if __name__ == "__main__":
    main()
