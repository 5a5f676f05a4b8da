"""`serve` under load: clients that send one sentence each, at concurrency 1, 8 and 32, against the
service with continuous batching and with batching off (each request run alone, as a hand-written
endpoint calling `nlp(text)` does), in the same run. Also the engine decision: the same pipeline
and the same request/response code on Ray Serve (what `serve` runs) and on LitServe.

    python bench/bench_serve.py          # full-size weights: bench/out/peer-full-bilm (bench_peer.py converts them)
    pip install litserve                                      # for the LitServe rows (not a dependency)
    python bench/bench_serve.py --engines ray --seconds 20
    python bench/bench_serve.py --peer /tmp/peer               # and AllenNLP's Elmo on the same sentences
    python bench/bench_serve.py --device cuda --engines ray    # replicas on the GPU, and on the CPU in the same run

With the peer's folder (../shared/tools/peer-allennlp/setup.sh), the same run also times AllenNLP's
`Elmo` (fp32, its own venv, the same weights) on the same lines, tokenized by spaCy: one line per
call, as a hand-written endpoint around it runs each request, and batches of 32 lines, the most
32 clients could be batched into. No ELMo server exists to compare the service itself with.

After the closed-loop cells, the batched Ray service (started with `--max-concurrent-requests`
OVERLOAD_LIMIT) takes an open-loop overload: requests sent at OVERLOAD_FACTOR times its capacity
(its requests/s at 32 clients) for --seconds, whatever the answers: the share answered 429, the
admitted requests' p50 and p99, and any 5xx.

Each cell is bounded: at most --requests requests or --seconds seconds, whichever comes first.
Sentences: lines of shared/data/corpus/valid.txt (real text), each request one line. Writes
bench/results/serve-cpu.json and .png and its section of BENCHMARKS.md; with --device cuda, the
same load against replicas on the GPU (`serve --device cuda`) and on the CPU, one after the other in
the same run, in serve-cuda.json and .png and a section of its own. LitServe's rows need LitServe
(left out, with a note, where it is not installed) and run on the CPU only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from report import SHARED, result_name, write_section

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
WEIGHTS = ROOT / "bench" / "out" / "peer-full-bilm"
CONCURRENCY = [1, 8, 32]
OVERLOAD_FACTOR = 4  # the overload's offered requests/s, as a multiple of the service's capacity
OVERLOAD_LIMIT = 32  # --max-concurrent-requests of the batched Ray service: the most clients of a cell


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sentences(count: int) -> list:
    text = (SHARED / "data" / "corpus" / "valid.txt").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if 5 <= len(line.split()) <= 40]
    return lines[:count]


async def load(url: str, texts: list, concurrency: int, max_requests: int, seconds: float) -> dict:
    """``concurrency`` clients, each sending one text a request, in turn, until the bounds."""
    import httpx

    latencies, words, sent = [], 0, 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client(client_id: int, http) -> None:
        nonlocal words, sent
        while sent < max_requests and time.perf_counter() < deadline:
            text = texts[sent % len(texts)]
            sent += 1
            started = time.perf_counter()
            response = await http.post(url, json={"texts": [text]})
            if response.status_code != 200:
                raise SystemExit(f"{url} answered {response.status_code}: {response.text[:2000]}")
            latencies.append(time.perf_counter() - started)
            words += len(response.json()["docs"][0]["words"])

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        await asyncio.gather(*(client(i, http) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    ms = np.array(latencies) * 1000
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        "words_per_s": round(words / elapsed, 1),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
    }


async def overload(url: str, texts: list, rate: float, seconds: float) -> dict:
    """Requests sent at ``rate`` a second for ``seconds`` whatever the answers (an open loop): how
    they were answered, and the admitted ones' latency."""
    import httpx

    statuses: dict = {}
    admitted, words = [], 0

    async def one(http, text: str) -> None:
        nonlocal words
        started = time.perf_counter()
        try:
            response = await http.post(url, json={"texts": [text]})
            status = str(response.status_code)
        except httpx.HTTPError as failure:
            status = type(failure).__name__
        statuses[status] = statuses.get(status, 0) + 1
        if status == "200":
            admitted.append(time.perf_counter() - started)
            words += len(response.json()["docs"][0]["words"])

    started = time.perf_counter()
    tasks = []
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=None)) as http:
        while time.perf_counter() - started < seconds:
            tasks.append(asyncio.create_task(one(http, texts[len(tasks) % len(texts)])))
            await asyncio.sleep(max(0.0, started + len(tasks) / rate - time.perf_counter()))
        await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    ms = np.array(admitted or [float("nan")]) * 1000
    return {
        "overload": True,
        "offered_rps": round(rate, 2),
        "sent": len(tasks),
        "statuses": statuses,
        "share_429": round(statuses.get("429", 0) / len(tasks), 3),
        "server_errors": sum(count for status, count in statuses.items() if not status.isdigit() or status >= "500"),
        "seconds": round(elapsed, 2),
        "admitted_words_per_s": round(words / elapsed, 1),
        "admitted_p50_ms": round(float(np.percentile(ms, 50)), 1),
        "admitted_p99_ms": round(float(np.percentile(ms, 99)), 1),
    }


def ratios(rows: list) -> dict:
    """The batched service against one request at a time (batching off, one client), per device."""
    found = {}
    for device in dict.fromkeys(r["device"] for r in rows):
        cell = {
            (r["batching"], r["concurrency"]): r["words_per_s"]
            for r in rows
            if r["device"] == device and r["engine"] == "ray" and not r.get("overload")
        }
        alone = cell.get((False, 1))
        if alone:
            found[device] = {
                "lone_client": round(cell[(True, 1)] / alone, 2) if (True, 1) in cell else None,
                "clients_32": round(cell[(True, 32)] / alone, 2) if (True, 32) in cell else None,
            }
    return found


def wait_until_up(url: str, seconds: float = 300) -> None:
    import httpx

    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {seconds:.0f} s")


try:  # the alternative engine, for the decision; its workers unpickle this module's class
    import litserve as ls
except ImportError:  # pragma: no cover
    ls = None

if ls is not None:

    class ElmoLitAPI(ls.LitAPI):
        """LitServe with the same request and response code as `serve`."""

        def __init__(self, weights: str, batching: bool, threads: int) -> None:
            super().__init__(api_path="/embed", max_batch_size=64 if batching else 1, batch_timeout=0.01 * batching)
            self.weights, self.batching, self.threads = weights, batching, threads

        def setup(self, device):
            import torch

            from spacy_elmo.serving.embedder import load_served_pipeline
            from spacy_elmo.serving.settings import ServeSettings

            torch.set_num_threads(self.threads)
            self.nlp = load_served_pipeline(ServeSettings(source=self.weights, threads=self.threads))

        def decode_request(self, request):
            from fastapi import HTTPException

            from spacy_elmo.serving.requests import BadRequest, ServeLimits, parse_request

            try:
                return parse_request(json.dumps(request).encode(), ServeLimits())
            except BadRequest as bad:
                raise HTTPException(bad.status, bad.message) from None

        def batch(self, inputs):
            return inputs

        def predict(self, requests):
            from spacy_elmo.serving.responses import embed_requests

            answers, _ = embed_requests(self.nlp, requests if self.batching else [requests])
            return answers if self.batching else answers[0]

        def unbatch(self, output):
            return output

        def encode_response(self, body):
            from fastapi import Response

            return Response(content=body, media_type="application/json")


def run_litserve(weights: str, port: int, batching: bool, threads: int) -> None:
    api = ElmoLitAPI(weights, batching, threads)
    ls.LitServer(api, accelerator="cpu", workers_per_device=1).run(
        host="127.0.0.1", port=port, generate_client_file=False
    )


def measure_engine(engine: str, device: str, batching: bool, texts: list, args) -> list:
    """The rows of one service (``engine`` with replicas on ``device``), one per client count; each
    names the device the service's biLM reports in /metadata (Ray Serve's)."""
    port = free_port()
    started = time.perf_counter()
    if engine == "ray":
        from spacy_elmo.serving.service import start, stop
        from spacy_elmo.serving.settings import ServeSettings

        limit = OVERLOAD_LIMIT if batching else None
        start(
            ServeSettings(
                source=args.weights,
                port=port,
                threads=args.threads,
                batching=batching,
                device=device,
                max_concurrent_requests=limit,
            )
        )
        server = None
    else:
        command = [sys.executable, __file__, "--litserve-server", args.weights, "--port", str(port)]
        command += ["--threads", str(args.threads)] + ([] if batching else ["--no-batching"])
        # its own process group: LitServe's workers are its children, and stop with it
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/health")
        warm = asyncio.run(load(f"http://127.0.0.1:{port}/embed", texts, 2, 8, 60))  # loads and plans
        up = time.perf_counter() - started
        bilm_device = served_device(f"http://127.0.0.1:{port}/metadata") if engine == "ray" else device
        rows = []
        for concurrency in args.clients:
            row = asyncio.run(load(f"http://127.0.0.1:{port}/embed", texts, concurrency, args.requests, args.seconds))
            row.update(engine=engine, device=device, bilm_device=bilm_device, batching=batching, startup_s=round(up, 1))
            print(json.dumps(row), flush=True)
            rows.append(row)
        if engine == "ray" and batching and max(args.clients) == max(CONCURRENCY):
            capacity = rows[-1]["requests_per_s"]
            offered = OVERLOAD_FACTOR * capacity
            row = asyncio.run(overload(f"http://127.0.0.1:{port}/embed", texts, offered, args.seconds))
            row.update(engine=engine, device=device, bilm_device=bilm_device, batching=True, capacity_rps=capacity)
            print(json.dumps(row), flush=True)
            rows.append(row)
        del warm
        return rows
    finally:
        if server is None:
            stop()
        else:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)


def served_device(url: str) -> str:
    """Where the service's biLM runs, as its /metadata says ("cpu", "cuda:0")."""
    import httpx

    return httpx.get(url, timeout=30).json()["elmo"]["device"]


PEER_BATCHES = {"one line per call": 1, "batches of 32 lines": 32}


def peer_speeds(peer: Path, texts: list, threads: int) -> dict:
    """words/s of AllenNLP's ``Elmo`` on ``texts`` (spaCy's tokens), per batch size of ``PEER_BATCHES``."""
    import tempfile

    import spacy
    from bench_peer import run_peer

    tokenizer = spacy.blank("en").tokenizer
    words = [[token.text for token in tokenizer(text) if not token.is_space] for text in texts]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lines.json"
        path.write_text(json.dumps(words))
        return {
            name: run_peer(peer, path, "plain", 3, threads, batch_size=size)["words_per_s"]
            for name, size in PEER_BATCHES.items()
        }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    services = dict.fromkeys((r["device"], r["engine"], r["batching"]) for r in report["rows"] if not r.get("overload"))
    for device, engine, batching in services:
        rows = [
            r
            for r in report["rows"]
            if not r.get("overload") and (r["device"], r["engine"], r["batching"]) == (device, engine, batching)
        ]
        label = f"{engine}, {'batched' if batching else 'one request at a time'}"
        label = f"{device}, {label}" if report["device"] != "cpu" else label
        style = "-" if batching else "--"
        clients = [r["concurrency"] for r in rows]
        left.plot(clients, [r["words_per_s"] for r in rows], style, marker="o", label=label)
        right.plot(clients, [r["p99_ms"] for r in rows], style, marker="o", label=label)
    for (name, speed), style in zip(report.get("peer", {}).items(), (":", "-.")):
        left.axhline(speed, color="#888888", linestyle=style, linewidth=1, label=f"AllenNLP Elmo, {name}")
    left.set(xlabel="concurrent clients", ylabel="words/s", xscale="log", title="throughput")
    right.set(xlabel="concurrent clients", ylabel="p99 latency (ms)", xscale="log", yscale="log", title="p99 latency")
    left.legend(fontsize=7)
    gpu = report.get("gpu")
    fig.suptitle(f"serve, full-size ELMo, {gpu['gpu'] + ' and ' if gpu else ''}{report['machine']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary_lines(report: dict) -> list:
    """The ratios to one request at a time and the overload run, as sentences."""
    lines = []
    names = {"lone_client": "a lone client", "clients_32": "32 clients"}
    for device, found in report.get("ratios", {}).items():
        measured = [f"{name} {found[key]}x" for key, name in names.items() if found.get(key) is not None]
        lines += [
            "",
            f"Batched against one request at a time ({device}, words/s of the batched service over the unbatched "
            f"one's in the same run): {', '.join(measured) or 'not measured'}.",
        ]
    for r in (r for r in report["rows"] if r.get("overload")):
        lines += [
            "",
            f"Overload ({r['device']}, `--max-concurrent-requests {OVERLOAD_LIMIT}`): {r['sent']} requests sent "
            f"at {r['offered_rps']} a second, {OVERLOAD_FACTOR}x the service's capacity ({r['capacity_rps']} "
            f"requests/s at 32 clients), over {r['seconds']} s: answers {r['statuses']}; "
            f"{r['share_429']:.0%} refused with 429; the admitted ones' p50 {r['admitted_p50_ms']:,.0f} ms and p99 "
            f"{r['admitted_p99_ms']:,.0f} ms at {r['admitted_words_per_s']:,.0f} words/s; "
            f"{r['server_errors']} 5xx or failed connections.",
        ]
    return lines


def update_markdown(report: dict) -> None:
    """The run's section of BENCHMARKS.md: ``bench_serve:cpu``, or ``bench_serve:cuda`` (a device column)."""
    on_gpu = report["device"] != "cpu"
    bounds = (
        f"full-size weights; each request one sentence of shared/data/corpus/valid.txt; each cell at most "
        f"{report['max_requests']} requests or {report['seconds']} s. Command: `{report['command']}`."
    )
    if on_gpu:
        gpu = report["gpu"]
        lines = [
            f"### `serve` on a GPU: replicas on the GPU against the CPU ({report['date']})",
            "",
            f"GPU: {gpu['gpu']}, driver {gpu['driver']}, torch {gpu['torch']}, CUDA {gpu['cuda']}; CPU: "
            f"{report['machine']}; {report['threads']} torch threads; {bounds} device: where the replicas' biLM "
            "ran, as their /metadata says (`serve --device cuda`: one GPU per replica, thinc's arrays in torch's "
            "allocator).",
        ]
    else:
        lines = [
            f"### `serve` under load: continuous batching against one request at a time ({report['date']})",
            "",
            f"Machine: {report['machine']}; {report['threads']} torch threads; {bounds}",
        ]
    head = "| device | engine | batching | clients |" if on_gpu else "| engine | batching | clients |"
    lines += [
        "",
        head + " requests | words/s | p50 ms | p99 ms | start (s) |",
        "|---" * on_gpu + "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in (r for r in report["rows"] if not r.get("overload")):
        lines.append(
            ("| " + r["bilm_device"] + " " if on_gpu else "")
            + f"| {r['engine']} | {'on' if r['batching'] else 'off'} | {r['concurrency']} | {r['requests']} | "
            f"{r['words_per_s']:,.0f} | {r['p50_ms']:,.0f} | {r['p99_ms']:,.0f} | {r['startup_s']} |"
        )
    lines += summary_lines(report)
    if report.get("peer"):
        speeds = ", ".join(f"{name}: {speed:,.0f} words/s" for name, speed in report["peer"].items())
        lines += [
            "",
            f"The peer in the same run, AllenNLP's `Elmo` (fp32, its own venv, the same weights and lines, spaCy's "
            f"tokens, {report['threads']} threads, no HTTP): {speeds}.",
        ]
    name = result_name(f"serve-{report['device']}", report.get("label"))
    lines += ["", f"![serve under load](bench/results/{name}.png)", ""]
    write_section("bench_" + name.replace("serve-", "serve:", 1), lines)


def services(args) -> list:
    """(engine, device, batching) of each service to measure: with --device cuda the GPU's first,
    then the CPU's; LitServe on the CPU only, and only where it is installed."""
    if "litserve" in args.engines and ls is None:
        print("LitServe is not installed (pip install litserve): its rows are left out", flush=True)
    devices = ["cuda", "cpu"] if args.device == "cuda" else ["cpu"]
    return [
        (engine, device, batching == "on")
        for device in devices
        for engine in args.engines
        if engine == "ray" or (device == "cpu" and ls is not None)
        for batching in args.batching
    ]


def write_outputs(report: dict) -> None:
    from spacy_elmo.files import atomic_write_json

    RESULTS.mkdir(parents=True, exist_ok=True)
    name = result_name(f"serve-{report['device']}", report.get("label"))
    atomic_write_json(RESULTS / f"{name}.json", report)
    plot(report, RESULTS / f"{name}.png")
    update_markdown(report)


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default=str(WEIGHTS))
    parser.add_argument("--engines", nargs="+", default=["ray", "litserve"], choices=["ray", "litserve"])
    parser.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="cuda: replicas on the GPU, then the CPU"
    )
    parser.add_argument("--batching", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--clients", nargs="+", type=int, default=CONCURRENCY, help="the cells' client counts")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--label", help="this run's results under their own name (serve-cpu-LABEL.json)")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--peer", type=Path, help="the peer's folder: AllenNLP's Elmo timed in the same run")
    parser.add_argument("--litserve-server", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--no-batching", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def new_report(args) -> dict:
    from spacy_elmo.kernels.machine import cpu_description

    report = {
        "machine": cpu_description(),
        "device": args.device,
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python bench/bench_serve.py", *sys.argv[1:]]),
        "threads": args.threads,
        "max_requests": args.requests,
        "seconds": args.seconds,
        "label": args.label,
        "rows": [],
        "peer": {},
    }
    if args.device == "cuda":
        from bench_gpu import device_description

        from spacy_elmo.serving.settings import ServeSettings, check_gpus_here

        try:
            check_gpus_here(ServeSettings(source=args.weights, device="cuda"))
        except ValueError as err:
            raise SystemExit(f"bench_serve.py --device cuda: {err}") from None
        report["gpu"] = device_description()
    return report


def main() -> None:
    args = parse_arguments()
    if args.litserve_server:
        run_litserve(args.litserve_server, args.port, not args.no_batching, args.threads)
        return
    if not Path(args.weights).is_dir():
        raise SystemExit(f"No weights at {args.weights}: give --weights, or convert the peer's (bench_peer.py).")
    texts, report = sentences(2000), new_report(args)
    for engine, device, batching in services(args):  # the outputs written after each: a run cut short keeps them
        report["rows"] += measure_engine(engine, device, batching, texts, args)
        report["ratios"] = ratios(report["rows"])
        write_outputs(report)
    if args.peer:
        report["peer"] = peer_speeds(args.peer, texts[:200], args.threads)
        write_outputs(report)


if __name__ == "__main__":
    main()
