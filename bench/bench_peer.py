"""Side by side with the peer: the elmo component against AllenNLP's `Elmo`, same weights, same
sentences, same run, same machine.

    bash ../shared/tools/peer-allennlp/setup.sh /tmp/peer      # once: the peer's venv + full-size weights
    python bench/bench_bilm.py --peer /tmp/peer                # or: python bench/bench_peer.py /tmp/peer

Workloads: 1 sentence (20 words) and 16 sentences (the fixture's sentences, as in the peer's own
benchmark), 64 and 1,000 sentences of real text (shared/data/corpus/valid.txt, spaCy's tokenizer;
the fixture has fewer than 64 distinct sentences, and repeats would flatter our char encoder, which
runs once per distinct token of a call).
Ours runs the `elmo` component end to end (`nlp.pipe`, spaCy's Doc handling included) on the
converted full-size random weights (93.6M parameters, original clipping), in exact fp32 and in the
opt-in bf16 and int8 (with their error against fp32); the peer runs `Elmo` in batches of 64.
"cache warm": ours starts from a token cache holding the workload's words, the peer uses
`vocab_to_cache` with the same words. Each configuration runs in its own process (its own peak
RSS). Writes bench/results/peer-cpu.json and .png (peer-cpu-capped-CAP.* with --cap) and the peer
section of BENCHMARKS.md, with the CPU model, the measured GEMM rate and the fp32 roof it implies.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_bilm import load_sentences
from report import SHARED, machine, result_name, write_section

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from simulated_cpus import SIMULATED_CPUS, why_not_cap  # noqa: E402  --cap NAME: the kernel caps of a lesser CPU

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = SHARED / "fixtures" / "elmo-allennlp"
CORPUS = SHARED / "data" / "corpus"
PEER_TOOLS = SHARED / "tools" / "peer-allennlp"
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "results"

WORKLOADS = ["1 sentence", "16 sentences", "64 sentences", "1,000 sentences"]
CONFIGURATIONS = [("fp32", False), ("fp32", True), ("bf16", False), ("int8", False)]  # (precision, cache warm)
REPEATS = {"1,000 sentences": 3}
LABEL: list = [None]  # --label: this run's results under their own name


def results_name(cap: str | None, label: str | None = None) -> str:
    """bench/results/<name>.json/.png and the BENCHMARKS.md section of a run, capped or not, on a
    machine given its own label (``--label``: another CPU's results beside the others) or not."""
    return result_name("peer-cpu", label, cap)


def workload_sentences(name: str) -> list:
    """The token lists of a workload (the peer's own batches for the fixture-sized ones)."""
    if name in ("64 sentences", "1,000 sentences", "10,000 sentences"):
        return load_sentences(int(name.split()[0].replace(",", "")))[0]
    streams = json.loads((FIXTURE / "sentences.json").read_text())
    flat = [line.split() for line in streams[0] + streams[1] + streams[2]]
    return {"1 sentence": [streams[0][9].split()], "16 sentences": flat[:16]}[name]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ours(spec: dict) -> dict:
    """One configuration of ours, in this process: words/s of nlp.pipe over the workload."""
    import spacy
    import torch

    torch.set_num_threads(spec["threads"])
    sentences = json.loads(Path(spec["sentences"]).read_text())
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": spec["weights"], "set_vector_hooks": False, "precision": spec["precision"]})
    nlp.initialize()
    from spacy_elmo.pipeline.bilm_layer import get_bilm

    bilm = get_bilm(nlp.get_pipe("elmo").model)
    bilm.token_cache.capacity = 20000 if spec["cache"] else 0
    report = {
        **time_pipe(nlp, sentences, spec["repeats"]),
        "peak_rss_mb": peak_rss_mb(),
        "distinct_share": distinct_share(sentences, nlp.get_pipe("elmo").settings.max_batch_tokens),
    }
    report["runs"], report["kernel"] = bilm.precision, bilm.precision_choice.kernel  # fp32 where it fell back
    if spec["precision"] != "fp32":
        report["error"] = error_against_fp32(bilm, sentences, spec["precision"])
    return report


def time_pipe(nlp, sentences: list, repeats: int, synchronize=lambda: None) -> dict:
    """words/s of ``nlp.pipe`` over docs of ``sentences``: the median of ``repeats`` runs after a
    warm-up (which fills the token cache when it is on); ``synchronize`` before each clock start."""
    from spacy.tokens import Doc

    times = []
    for _ in range(repeats + 1):
        docs = [Doc(nlp.vocab, words=s) for s in sentences]
        synchronize()
        start = time.perf_counter()
        for _ in nlp.pipe(docs, batch_size=1000):
            pass
        times.append(time.perf_counter() - start)
    words = sum(len(s) for s in sentences)
    median = statistics.median(times[1:])
    return {"words": words, "median_s": median, "words_per_s": words / median, "runs_s": times[1:]}


def distinct_share(sentences: list, max_batch_tokens: int) -> float:
    """Of the tokens the biLM reads (boundaries included), the share its char encoder runs on:
    each distinct token of a call once (the component's calls: ``batches_by_length``)."""
    from spacy_elmo.network.sentences import batches_by_length

    tokens = distinct = 0
    for batch in batches_by_length(sentences, max_batch_tokens):
        flat = [token for i in batch for token in ("<S>", *sentences[i], "</S>")]
        tokens, distinct = tokens + len(flat), distinct + len(set(flat))
    return distinct / tokens


def error_against_fp32(bilm, sentences, precision: str, max_batch_tokens: int = 4096) -> list:
    """Per layer: max |reduced - fp32| and the lowest and mean cosine of a token's two vectors."""
    from spacy_elmo import embed_sentences

    bilm = bilm.with_settings(precision="fp32")
    exact = embed_sentences(bilm, sentences, max_batch_tokens=max_batch_tokens)
    bilm = bilm.with_settings(precision=precision)
    return layer_errors(exact, embed_sentences(bilm, sentences, max_batch_tokens=max_batch_tokens))


def layer_errors(exact: list, reduced: list) -> list:
    """exact, reduced: one (L+1, T, 2P) array per sentence -> per layer, over every token: max
    |reduced - exact| (and max |exact|), the lowest and the mean cosine of a token's two vectors."""
    import numpy as np

    exact, reduced = np.concatenate(exact, axis=1), np.concatenate(reduced, axis=1)
    cosine = (exact * reduced).sum(-1) / (np.linalg.norm(exact, axis=-1) * np.linalg.norm(reduced, axis=-1))
    return [
        {
            "max_abs": float(np.abs(exact[j] - reduced[j]).max()),
            "max_abs_fp32": float(np.abs(exact[j]).max()),
            "min_cosine": float(cosine[j].min()),
            "mean_cosine": float(cosine[j].mean()),
        }
        for j in range(exact.shape[0])
    ]


def run_ours(spec: dict) -> dict:
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"ours failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_peer(
    peer: Path, sentences_file: Path, mode: str, repeats: int, threads: int, device: str = "cpu", batch_size: int = 64
) -> dict:
    """The peer's RESULT for one workload and mode, run by its own Python (PEER/venv) on ``device``,
    in batches of ``batch_size`` sentences."""
    environment = {**os.environ, "PYTHONPATH": str(PEER_TOOLS / "stubs")}
    command = [
        str(peer / "venv" / "bin" / "python"),
        str(ROOT / "bench" / "peer_allennlp.py"),
        "--model",
        str(peer / "full"),
        "--sentences",
        str(sentences_file),
        "--mode",
        mode,
        "--reps",
        str(repeats),
        "--threads",
        str(threads),
        "--device",
        device,
        "--batch-size",
        str(batch_size),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    line = next((row for row in done.stdout.splitlines() if row.startswith("RESULT ")), None)
    if done.returncode or line is None:
        raise SystemExit(f"the peer failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])


def converted_weights(peer: Path) -> Path:
    """The peer's full-size weights in our native format (converted once)."""
    from spacy_elmo import import_original, save_bilm

    target = OUT / "peer-full-bilm"
    if not (target / "model.safetensors").is_file():
        save_bilm(import_original(peer / "full" / "options.json", peer / "full" / "lm_weights.hdf5"), target)
    return target


def gemm_roof(threads: int) -> dict:
    """The fp32 GEMM rate (the step loop's shapes' big brother: 4096 x 4096 by 4096 x 512), the
    FLOP of one word through the original-size biLM counted from its shapes, and what the exact
    step loop's own matmuls reach on this machine (``step_loop_limits``)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(4096, 4096), torch.randn(4096, 512)
    gflops = 2 * 4096 * 4096 * 512 / _seconds(lambda: torch.mm(a, b)) / 1e9
    flop = flop_per_word()
    return {
        "gemm_gflops": gflops,
        "flop_per_word": flop,
        "roof_words_per_s": gflops * 1e9 / flop,
        **step_loop_limits(),
        **schedule_limit(workload_sentences("64 sentences")),
    }


def flop_per_word(
    cells: int = 4096,
    proj: int = 512,
    layers: int = 2,
    filters: int = 2048,
    highway: int = 2,
    conv_flop_per_window: int = 2 * 16 * 12320,
    windows: int = 50,
) -> float:
    """Multiply-adds x 2 per token: LSTM (input, recurrent, projection) for each layer and direction,
    and the char CNN (convolutions over the token's 50 character windows, highways, projection)."""
    lstm = lstm_flop_per_word(cells, proj, layers)
    chars = conv_flop_per_window * windows + highway * 2 * 2 * filters * filters + 2 * filters * proj
    return float(lstm + chars)


def step_loop_limits() -> dict:
    """The exact path's step matmuls (recurrent h (M, P) -> (M, 4H) and projection (M, H) -> (M, P),
    through ``StepMatmuls`` as the step loop runs them) of the original-size LSTM, at 64 rows and at
    one row. At 64 rows: their GFLOP/s, and the words/s of the LSTM's matmuls alone (input
    projection included) at that rate. At one row every step reads the recurrent and projection
    weights of all 2 x L layers from memory: the GB/s reached, and the words/s that reading alone
    allows."""
    import torch

    config, matmuls = original_step_matmuls()
    cells, proj, layers = config.lstm_dim, config.projection_dim, config.n_layers
    step = {}
    with torch.no_grad():
        for rows in (64, 1):
            h, hidden = torch.randn(rows, proj), torch.randn(rows, cells)
            step[rows] = _seconds(functools.partial(matmuls.recurrent, h))
            step[rows] += _seconds(functools.partial(matmuls.project, hidden))
    step_flop = 2 * (4 * cells * proj + cells * proj)  # per row: recurrent + projection
    step_bytes = (4 * cells * proj + cells * proj) * 4  # fp32 weights one step of one layer reads
    same_bytes = torch.randn(step_bytes // 4)
    return {
        "step_gflops_64_rows": step_flop * 64 / step[64] / 1e9,
        "lstm_words_per_s_64_rows": step_flop * 64 / step[64] / lstm_flop_per_word(cells, proj, layers),
        "step_weight_mb": step_bytes / 1e6,
        "step_gb_per_s_1_row": step_bytes / step[1] / 1e9,
        "read_gb_per_s": step_bytes / _seconds(same_bytes.sum) / 1e9,
        "weight_read_words_per_s_1_row": 1 / (2 * layers * step[1]),
    }


def schedule_limit(sentences: list) -> dict:
    """The LSTM's matmuls alone on a workload's own schedule, as the exact step loop runs them:
    the input projection of every token, then one recurrent and one projection call per step at
    the lane plan's row counts (the longest sentence sets the number of steps; lanes fall idle as
    their sentences end), for each of the 2 x L layers. Returns the steps and the words/s that
    these matmuls alone allow."""
    import torch

    from spacy_elmo.network.lanes import LanePlan, lane_multiple, step_lanes_for
    from spacy_elmo.network.step_loop import Scratch

    config, matmuls = original_step_matmuls()
    lengths = [len(sentence) + 2 for sentence in sentences]  # with the sentence boundaries
    width = step_lanes_for(lengths, matmuls.kernels.blocking.step_lanes, config.lstm_dim)  # as the biLM picks it
    plan = LanePlan.build(lengths, width, 1, torch.device("cpu"))
    multiple = lane_multiple(config.lstm_dim)
    rows = [count for step in range(plan.n_steps) for _, count in plan.groups(step, multiple)]
    scratch = Scratch()
    with torch.no_grad():
        x = torch.randn(sum(lengths), config.projection_dim)
        h, hidden = torch.randn(max(rows), config.projection_dim), torch.randn(max(rows), config.lstm_dim)

        def one_layer() -> None:
            matmuls.inputs(x, scratch)
            for count in rows:
                matmuls.recurrent(h[:count])
                matmuls.project(hidden[:count])

        seconds = _seconds(one_layer, runs=3)
    words = sum(len(sentence) for sentence in sentences)
    return {"schedule_steps_64": plan.n_steps, "lstm_schedule_words_per_s_64": words / (2 * config.n_layers * seconds)}


def original_step_matmuls():
    """The original-size config and ``StepMatmuls`` of one of its LSTM layers (random weights,
    exact fp32, CPU): the step loop's matmuls as it runs them."""
    import torch

    from spacy_elmo.kernels.select import select
    from spacy_elmo.network.config import BiLMConfig
    from spacy_elmo.network.lstm_layer import LstmLayer
    from spacy_elmo.network.step_loop import StepMatmuls

    config = BiLMConfig.preset("original")
    layer = LstmLayer(config.projection_dim, config)
    with torch.no_grad():
        layer.reset_parameters()
    return config, StepMatmuls(layer, select(torch.device("cpu"), "fp32"))


def _seconds(call, runs: int = 10) -> float:
    """Seconds per ``call()``: the mean of ``runs`` calls after one warm-up."""
    call()
    start = time.perf_counter()
    for _ in range(runs):
        call()
    return (time.perf_counter() - start) / runs


def run_all(peer: Path, threads: int, workloads: list = WORKLOADS) -> dict:
    weights = converted_weights(peer)
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for workload in workloads:
        sentences_file = OUT / f"peer-{workload.split()[0].replace(',', '')}.json"
        sentences_file.write_text(json.dumps(workload_sentences(workload)))
        repeats = REPEATS.get(workload, 5)
        peers = {
            cache: run_peer(peer, sentences_file, "cached" if cache else "plain", repeats, threads)
            for cache in (False, True)
        }
        for precision, cache in CONFIGURATIONS:
            spec = {
                "weights": str(weights),
                "sentences": str(sentences_file),
                "cache": cache,
                "threads": threads,
                "repeats": repeats,
                "precision": precision,
            }
            mine, theirs = run_ours(spec), peers[cache]
            row = {
                "workload": workload,
                "cache": "warm" if cache else "off",
                "precision": precision,
                "ours": mine,
                "peer": theirs,
                "ratio": mine["words_per_s"] / theirs["words_per_s"],
                "measured": time.strftime("%Y-%m-%d %H:%M"),
            }
            rows.append(row)
            print(
                f"{workload:>16} {precision} cache {row['cache']:>4}: ours {mine['words_per_s']:8.1f} words/s, "
                f"AllenNLP {theirs['words_per_s']:8.1f} -> {row['ratio']:.2f}x",
                flush=True,
            )
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or None
    return {
        "machine": machine(threads),
        "capped": cap,
        "date": time.strftime("%Y-%m-%d"),
        "roof": gemm_roof(threads),
        "rows": rows,
    }


def rerun(peer: Path, threads: int, workloads: list, cap: str | None = None) -> dict:
    """The last report with the rows of ``workloads`` measured again (each row's two sides still
    run back to back; a row says when)."""
    by_count = {w.split()[0].replace(",", ""): w for w in WORKLOADS}
    unknown = [w for w in workloads if w not in by_count]
    if unknown:
        raise SystemExit(f"Unknown workloads {unknown}; choose sentence counts from {list(by_count)}.")
    workloads = [by_count[w] for w in workloads]
    fresh = run_all(peer, threads, workloads)
    previous_file = RESULTS / f"{results_name(cap, LABEL[0])}.json"
    if not previous_file.is_file():
        return fresh
    previous = json.loads(previous_file.read_text())
    kept = {(r["workload"], r["precision"], r["cache"]): r for r in previous["rows"]}
    kept.update({(r["workload"], r["precision"], r["cache"]): r for r in fresh["rows"]})
    order = [(w, p, "warm" if c else "off") for w in WORKLOADS for p, c in CONFIGURATIONS]
    return {**fresh, "rows": [kept[key] for key in order if key in kept]}


def write_outputs(report: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    from spacy_elmo.files import atomic_write_json

    name = results_name(report.get("capped"), report.get("label"))
    atomic_write_json(RESULTS / f"{name}.json", report)
    plot(report, RESULTS / f"{name}.png")
    update_markdown(report)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['workload']}\n{_precision_label(r)}, cache {r['cache']}" for r in report["rows"]]
    ratios = [r["ratio"] for r in report["rows"]]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    bars = ax.bar(labels, ratios, color=["#1f77b4" if r >= 1 else "#d62728" for r in ratios])
    ax.axhline(1.0, color="#444444", linewidth=1)
    for bar, ratio in zip(bars, ratios):
        ax.text(bar.get_x() + bar.get_width() / 2, ratio, f"{ratio:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("words/s of ours / words/s of AllenNLP")
    capped = f" (CAPPED at {report['capped']}: simulating a lesser CPU)" if report.get("capped") else ""
    ax.set_title(f"elmo component vs AllenNLP Elmo, same weights and run{capped}\n{report['machine']}", fontsize=8)
    ax.tick_params(axis="x", labelsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _workloads_measured(report: dict) -> str:
    """The workloads the report has rows for, in WORKLOADS order, e.g. '1 sentence, 64 sentences'."""
    present = {r["workload"] for r in report["rows"]}
    return ", ".join(w for w in WORKLOADS if w in present)


def _precision_label(row: dict) -> str:
    """The precision asked for, and what ran where the machine fell back to exact fp32."""
    runs = row["ours"].get("runs", row["precision"])
    return row["precision"] if runs == row["precision"] else f"{row['precision']} (fell back: ran {runs})"


def update_markdown(report: dict) -> None:
    roof, cap, label = report["roof"], report.get("capped"), report.get("label")
    name = results_name(cap, label)
    title = f"capped at {cap}, simulating a lesser CPU" if cap else "uncapped"
    title = f"{label}, {title}" if label else title
    command_cap = (f" --cap {cap}" if cap else "") + (f" --label {label}" if label else "")
    simulated = (
        f"**Capped run**: oneDNN, ATen and MKL limited to {cap} (`--cap {cap}`: "
        f"{', '.join(SIMULATED_CPUS[cap])}) on the machine below, both sides alike; the figures simulate that "
        "CPU class's kernels, not its clock, caches or memory. "
        if cap
        else ""
    )
    lines = [
        f"### Against the peer (AllenNLP `Elmo`) on CPU, {title} ({report['date']})",
        "",
        f"{simulated}Machine: {report['machine']}. Full-size random weights (93.6M parameters, clipping on) from "
        f"../shared/tools/peer-allennlp, converted for ours; workloads: {_workloads_measured(report)} (1 and 16: "
        "the fixture's sentences; 64 and 1,000: shared/data/corpus/valid.txt); ours is the `elmo` component through "
        "`nlp.pipe` "
        "(exact fp32 path), the peer `Elmo` in batches of 64; cache warm = our token cache / AllenNLP's "
        "`vocab_to_cache`, both holding the workload's words. words/s: median of 5 runs (3 for 1,000 "
        "sentences) after a warm-up, each configuration in its own process; a row's two sides run back to back "
        f"(rows measured {_measured_span(report)}). Command: "
        f"`python bench/bench_peer.py PEER_DIR{command_cap}`. "
        'bf16 and int8 rows (`precision = "bf16"` / `"int8"`, opt-in) are compared with the '
        "peer's fp32 and carry their error against our fp32 on the same sentences, "
        "per layer: max abs difference (and the largest fp32 value) / lowest cosine of a token's two vectors.",
        "",
        "| workload | precision | cache | ours (words/s) | AllenNLP (words/s) | ratio | ours peak RSS (MB) | AllenNLP "
        "peak RSS (MB) | error vs fp32 (layers 0 / 1 / 2) |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        error = " / ".join(
            f"{e['max_abs']:.1e} (of {e['max_abs_fp32']:.2f}), cos {e['min_cosine']:.5f}"
            for e in r["ours"].get("error", [])
        )
        precision = _precision_label(r)
        lines.append(
            f"| {r['workload']} | {precision} | {r['cache']} | {r['ours']['words_per_s']:,.1f} | "
            f"{r['peer']['words_per_s']:,.1f} | "
            f"**{r['ratio']:.2f}x** | {r['ours']['peak_rss_mb']:,.0f} | {r['peer']['peak_rss_mb']:,.0f} | "
            f"{error or '-'} |"
        )
    lines += [
        "",
        f"fp32 roof: a 4096x4096 by 4096x512 matmul runs at {roof['gemm_gflops']:.0f} GFLOP/s here; one word through "
        f"the biLM is {roof['flop_per_word'] / 1e6:.0f} MFLOP (LSTM input, recurrent and projection matmuls of 2 "
        "layers x 2 "
        f"directions, and the char CNN's convolutions over 50 windows, 2 highways and projection), so the roof is "
        f"{roof['roof_words_per_s']:,.0f} words/s.",
        "",
        *roof_lines(report),
        "",
        f"![against the peer](bench/results/{name}.png)",
        "",
    ]
    write_section(f"bench_peer:{name.removeprefix('peer-')}", lines)


def roof_lines(report: dict) -> list:
    """How the exact path stands against the roof, given that the char encoder runs once per
    distinct token of a call, and what the step loop's own matmuls allow at 64 rows and at one."""
    roof = report["roof"]
    if "step_gflops_64_rows" not in roof:
        return []
    chars = roof["flop_per_word"] - lstm_flop_per_word()
    exact = {r["workload"]: r for r in report["rows"] if r["precision"] == "fp32" and r["cache"] == "off"}
    parts = []
    for workload, row in exact.items():
        share, words_per_s = row["ours"]["distinct_share"], row["ours"]["words_per_s"]
        flop = lstm_flop_per_word() + chars * share
        parts.append(
            f"{workload}: distinct tokens {100 * share:.0f}% of the tokens read, {flop / 1e6:.0f} MFLOP run per word, "
            f"{100 * words_per_s / roof['roof_words_per_s']:.0f}% of the roof, "
            f"{100 * words_per_s * flop / 1e9 / roof['gemm_gflops']:.0f}% of the GEMM rate on what it runs"
        )
    peer = {r["workload"]: r["peer"]["words_per_s"] for r in report["rows"] if r["cache"] == "off"}
    name = results_name(report.get("capped"), report.get("label"))
    lines = [
        "Within a call the char encoder runs once per distinct token (sentence boundaries included; exact, since a "
        "token's representation does not depend on its companions), so the exact path runs fewer FLOP per word than "
        "the roof counts. " + "; ".join(parts) + ".",
        "",
        f"What the step loop's own matmuls allow here (`roof` in bench/results/{name}"
        ".json): at 64 rows the "
        f"recurrent and projection matmuls run at {roof['step_gflops_64_rows']:.0f} GFLOP/s as the loop runs them, so "
        f"the LSTM's matmuls alone allow {roof['lstm_words_per_s_64_rows']:,.0f} words/s",
    ]
    if "64 sentences" in peer:
        lines[-1] += f" ({roof['lstm_words_per_s_64_rows'] / peer['64 sentences']:.1f}x the peer at 64 sentences)"
    lines[-1] += (
        f". At one row every step reads each layer's fp32 recurrent and projection weights "
        f"({roof['step_weight_mb']:.0f} MB) from memory, at "
        f"{roof['step_gb_per_s_1_row']:.1f} GB/s: that reading alone allows "
        f"{roof['weight_read_words_per_s_1_row']:,.0f} words/s"
    )
    if "1 sentence" in peer:
        lines[-1] += f" ({roof['weight_read_words_per_s_1_row'] / peer['1 sentence']:.1f}x the peer at one sentence)"
    lines[-1] += "; int8 through int8 dot products (VNNI, AMX) reads a quarter of those bytes."
    if "read_gb_per_s" in roof:
        lines[-1] += (
            f" For comparison, summing a tensor of the same {roof['step_weight_mb']:.0f} MB runs at "
            f"{roof['read_gb_per_s']:.1f} GB/s here."
        )
    if "lstm_schedule_words_per_s_64" in roof:
        limit = roof["lstm_schedule_words_per_s_64"]
        line = (
            f"On the 64-sentence workload's own schedule ({roof['schedule_steps_64']} steps, its longest sentence with "
            "boundaries; lanes fall idle as their sentences end, while every step still reads the weights) the LSTM's "
            f"matmuls alone allow {limit:,.0f} words/s"
        )
        if "64 sentences" in peer:
            line += f" ({limit / peer['64 sentences']:.1f}x the peer)"
        if "64 sentences" in exact:
            line += (
                f"; the exact path reaches {100 * exact['64 sentences']['ours']['words_per_s'] / limit:.0f}% of that"
            )
        lines += ["", line + ", the char encoder, cell updates and spaCy included."]
    return lines


def lstm_flop_per_word(cells: int = 4096, proj: int = 512, layers: int = 2) -> float:
    """The LSTM's share of ``flop_per_word``: input, recurrent and projection matmuls."""
    return float(2 * layers * 2 * (4 * cells * proj * 2 + cells * proj))


def _measured_span(report: dict) -> str:
    """When the rows were measured: one run, or a run and reruns of chosen rows (rows from before
    reruns were recorded carry only their date)."""
    return ", ".join(sorted({r.get("measured", report["date"]) for r in report["rows"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", nargs="?", help="the folder setup.sh built (venv/ and full/)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--workloads",
        nargs="+",
        help="rerun only these sentence counts (e.g. 1000 64), replacing their rows in bench/results/peer-cpu.json",
    )
    parser.add_argument(
        "--cap",
        choices=sorted(SIMULATED_CPUS),
        help="run every process with its kernels capped at this ISA (simulating a lesser CPU); rows labelled capped",
    )
    parser.add_argument("--label", help="this machine's results under their own name (peer-cpu-LABEL), e.g. zen3")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    LABEL[0] = args.label
    if args.cap and why_not_cap(args.cap):
        raise SystemExit(f"--cap {args.cap}: {why_not_cap(args.cap)}; a cap only simulates a lesser CPU.")
    if args.cap and os.environ.get("ONEDNN_MAX_CPU_ISA") != args.cap:
        # again from the start, with the caps in place before torch loads (ATen reads its cap at import)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **SIMULATED_CPUS[args.cap]})
    if args.worker:
        print(json.dumps(ours(json.loads(args.worker))))
        return
    if not args.peer or not (Path(args.peer) / "venv").is_dir():
        raise SystemExit(
            "Give the peer's folder: bash ../shared/tools/peer-allennlp/setup.sh PEER_DIR, then PEER_DIR here."
        )
    if args.workloads:
        report = rerun(Path(args.peer), args.threads, args.workloads, args.cap)
    else:
        report = run_all(Path(args.peer), args.threads)
    write_outputs({**report, "label": args.label} if args.label else report)
    print(f"Wrote BENCHMARKS.md and bench/results/{results_name(args.cap, args.label)}.json/.png")


if __name__ == "__main__":
    main()
