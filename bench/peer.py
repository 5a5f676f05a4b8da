"""Side by side with the peer on a CPU: the elmo component against AllenNLP's `Elmo`, same weights,
same sentences, same run, same machine.

    bash ../shared/tools/peer-allennlp/setup.sh /tmp/peer       # once: the peer's venv + full-size weights
    python bench/peer.py /tmp/peer                              # every workload and precision
    python bench/peer.py /tmp/peer --workloads 1 64             # these rows again, the others kept
    python bench/peer.py /tmp/peer --cap AVX2                   # kernels capped as on an AVX2-only CPU
    python bench/peer.py /tmp/peer --label zen3                 # this CPU's results beside another's
    python bench/peer.py /tmp/peer --pythons A/bin/python B/bin/python   # fp32 under other torches
    python bench/peer.py --weights DIR --workloads 1 --precisions fp32   # ours alone, no peer
    python bench/peer.py --render-only [--cap CAP] [--label L] [--pythons]  # the section again, from the file

Workloads (bench/suite/workloads.py): 1 and 16 sentences of the fixture, 64 and 1,000 of real text.
Ours runs the `elmo` component end to end (`nlp.pipe`, spaCy's Doc handling included) on the peer's
full-size random weights, converted (93.6M parameters, original clipping), in exact fp32 (its token
cache off, and warm: holding the workload's words) and in the opt-in bf16 and int8, with their
error against fp32; the peer runs `Elmo` in batches of 64 (`vocab_to_cache` beside our warm cache).
Each configuration runs in its own process (its own peak RSS); a row's two sides run back to back.
Beside the rows, this machine's roof: its fp32 GEMM rate and what the exact step loop's own matmuls
allow. With --pythons, ours in fp32 runs under each given Python (a venv with spacy-elmo and another
torch) against one peer run per workload.

Writes bench/results/peer-cpu[-LABEL][-capped-CAP].json and .png (peer-cpu-torch.json with
--pythons) and the section "peer:<that name>" of BENCHMARKS.md. Needs the peer's folder for the
peer's column (not in CI: the test suite runs ours alone on the fixture's weights).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import List, Optional

from suite.caps import SIMULATED_CPUS, run_capped
from suite.peer import peer_folder, run_peer
from suite.report import (
    OUT,
    command_line,
    figure_link,
    figure_path,
    machine,
    read_results,
    result_name,
    run_worker,
    save_figure,
    worker_reply,
    write_results,
    write_section,
)
from suite.timing import timed
from suite.workloads import (
    converted_weights,
    error_against_fp32,
    peak_rss_mb,
    time_pipe,
    workload_named,
    workload_sentences,
)

WORKLOADS = ["1 sentence", "16 sentences", "64 sentences", "1,000 sentences"]
TORCH_WORKLOADS = ["1 sentence", "64 sentences"]
PRECISIONS = ("fp32", "bf16", "int8")
CACHES = ("off", "warm")  # fp32 runs both; the reduced precisions run with the cache off
REPEATS = {"1,000 sentences": 3}


def configurations(precisions: List[str], caches: List[str]) -> List[tuple]:
    """(precision, cache warm) pairs to run: fp32 with each cache state asked for, the others cold."""
    pairs = [("fp32", cache == "warm") for cache in CACHES if cache in caches]
    return [pair for pair in pairs if "fp32" in precisions] + [(p, False) for p in PRECISIONS[1:] if p in precisions]


def ours(spec: dict) -> dict:
    """One configuration of ours, in this process: ``nlp.pipe`` over the workload."""
    import spacy
    import torch

    torch.set_num_threads(spec["threads"])
    sentences = json.loads(Path(spec["sentences"]).read_text())
    nlp = spacy.blank("en")
    config = {"weights": spec["weights"], "set_vector_hooks": False, "precision": spec["precision"]}
    nlp.add_pipe("elmo", config=config)
    nlp.initialize()
    runner = nlp.get_pipe("elmo").runner
    runner.token_cache.capacity = 20000 if spec["cache"] else 0
    max_batch_tokens = nlp.get_pipe("elmo").settings.max_batch_tokens
    report = {
        **time_pipe(nlp, sentences, spec["repeats"]),
        "peak_rss_mb": peak_rss_mb(),
        "distinct_share": distinct_share(sentences, max_batch_tokens),
        "runs": runner.precision,  # fp32 where the machine fell back
        "kernel": runner.choice.kernel,
        "torch": torch.__version__,
    }
    if spec["precision"] != "fp32":
        report["error"] = error_against_fp32(runner, sentences, spec["precision"])
    return report


def distinct_share(sentences: list, max_batch_tokens: int) -> float:
    """Of the tokens the biLM reads (boundaries included), the share its char encoder runs on:
    each distinct token of a call once (the component's calls: ``batches_by_length``)."""
    from spacy_elmo.network.runner import batches_by_length

    tokens = distinct = 0
    for batch in batches_by_length(sentences, max_batch_tokens):
        flat = [token for i in batch for token in ("<S>", *sentences[i], "</S>")]
        tokens, distinct = tokens + len(flat), distinct + len(set(flat))
    return distinct / tokens


def sentences_file(workload: str) -> Path:
    """The workload's token lists as a JSON file both sides read."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"peer-{workload.split()[0].replace(',', '')}.json"
    path.write_text(json.dumps(workload_sentences(workload)))
    return path


def run_all(peer: Optional[Path], weights: Path, args, workloads: List[str]) -> dict:
    """Every asked configuration of every workload, each with the peer's figure of the same run."""
    rows = []
    for workload in workloads:
        path, repeats = sentences_file(workload), args.repeats or REPEATS.get(workload, 5)
        pairs = configurations(args.precisions, args.caches)
        theirs = {
            warm: run_peer(peer, path, "cached" if warm else "plain", repeats, args.threads) if peer else None
            for warm in {warm for _, warm in pairs}
        }
        for precision, warm in pairs:
            spec = {"weights": str(weights), "sentences": str(path), "cache": warm, "threads": args.threads}
            mine = run_worker(__file__, {**spec, "repeats": repeats, "precision": precision})
            rows.append(row(workload, precision, "warm" if warm else "off", mine, theirs[warm]))
    return {"machine": machine(args.threads), "capped": args.cap, "date": time.strftime("%Y-%m-%d"), "rows": rows}


def row(workload: str, precision: str, cache: str, mine: dict, theirs: Optional[dict]) -> dict:
    """One row of the report, printed as it comes."""
    ratio = mine["words_per_s"] / theirs["words_per_s"] if theirs else None
    against = f", AllenNLP {theirs['words_per_s']:8.1f} -> {ratio:.2f}x" if theirs else ""
    print(f"{workload:>16} {precision} cache {cache:>4}: ours {mine['words_per_s']:8.1f} words/s{against}", flush=True)
    return {
        "workload": workload,
        "cache": cache,
        "precision": precision,
        "ours": mine,
        "peer": theirs,
        "ratio": ratio,
        "measured": time.strftime("%Y-%m-%d %H:%M"),
    }


def merged_with_kept(fresh: dict, name: str) -> dict:
    """``fresh``'s rows in place of the same rows of the last report of that name, the others kept
    (each row says when it was measured)."""
    try:
        previous = read_results(name)
    except SystemExit:
        return fresh
    key = lambda r: (r["workload"], r["precision"], r["cache"])  # noqa: E731
    kept = {key(r): r for r in previous["rows"]}
    kept.update({key(r): r for r in fresh["rows"]})
    order = [(w, p, c) for w in WORKLOADS for p in PRECISIONS for c in CACHES]
    return {**fresh, "rows": [kept[k] for k in order if k in kept]}


# The machine's roof: what its fp32 GEMM and the exact step loop's own matmuls allow.


def seconds_per_call(call, runs: int = 10) -> float:
    return timed(call, runs).mean_s


def gemm_roof(threads: int) -> dict:
    """The fp32 GEMM rate (a 4096 x 4096 by 4096 x 512 matmul: the step loop's shapes' big brother),
    the FLOP of one word through the original-size biLM counted from its shapes, and what the exact
    step loop's own matmuls reach here."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(4096, 4096), torch.randn(4096, 512)
    gflops = 2 * 4096 * 4096 * 512 / seconds_per_call(lambda: torch.mm(a, b)) / 1e9
    flop = flop_per_word()
    return {
        "gemm_gflops": gflops,
        "flop_per_word": flop,
        "roof_words_per_s": gflops * 1e9 / flop,
        **step_loop_limits(),
        **schedule_limit(workload_sentences("64 sentences")),
    }


def flop_per_word(filters: int = 2048, highway: int = 2, proj: int = 512) -> float:
    """Multiply-adds x 2 per token: the LSTM's (``lstm_flop_per_word``) and the char CNN's
    (convolutions over the token's 50 character windows, highways, projection)."""
    conv_flop_per_window, windows = 2 * 16 * 12320, 50
    chars = conv_flop_per_window * windows + highway * 2 * 2 * filters * filters + 2 * filters * proj
    return float(lstm_flop_per_word() + chars)


def lstm_flop_per_word(cells: int = 4096, proj: int = 512, layers: int = 2) -> float:
    """Input, recurrent and projection matmuls of each layer and direction, per token."""
    return float(2 * layers * 2 * (4 * cells * proj * 2 + cells * proj))


def original_step_matmuls():
    """The original-size config and ``StepMatmuls`` of one of its LSTM layers (random weights,
    exact fp32, CPU): the step loop's matmuls as it runs them."""
    import torch

    from spacy_elmo.kernels.lstm_steps import StepMatmuls
    from spacy_elmo.kernels.select import select
    from spacy_elmo.network.config import BiLMConfig
    from spacy_elmo.network.lstm_layer import LstmLayer

    config = BiLMConfig.preset("original")
    layer = LstmLayer(config.projection_dim, config)
    with torch.no_grad():
        layer.reset_parameters()
    return config, StepMatmuls(layer, select(torch.device("cpu"), "fp32"))


def step_loop_limits() -> dict:
    """The step matmuls (recurrent (M, P) -> (M, 4H), projection (M, H) -> (M, P)) of the original
    LSTM as the exact loop runs them, at 64 rows (GFLOP/s, and the words/s of the LSTM's matmuls at
    that rate) and at one row (every step reads the weights: GB/s, and the words/s that allows)."""
    import torch

    config, matmuls = original_step_matmuls()
    cells, proj, layers = config.lstm_dim, config.projection_dim, config.n_layers
    step = {}
    with torch.no_grad():
        for rows in (64, 1):
            h, hidden = torch.randn(rows, proj), torch.randn(rows, cells)
            step[rows] = seconds_per_call(functools.partial(matmuls.recurrent, h))
            step[rows] += seconds_per_call(functools.partial(matmuls.project, hidden))
    step_flop = 2 * (4 * cells * proj + cells * proj)  # per row: recurrent + projection
    step_bytes = (4 * cells * proj + cells * proj) * 4  # the fp32 weights one step of one layer reads
    same_bytes = torch.randn(step_bytes // 4)
    return {
        "step_gflops_64_rows": step_flop * 64 / step[64] / 1e9,
        "lstm_words_per_s_64_rows": step_flop * 64 / step[64] / lstm_flop_per_word(cells, proj, layers),
        "step_weight_mb": step_bytes / 1e6,
        "step_gb_per_s_1_row": step_bytes / step[1] / 1e9,
        "read_gb_per_s": step_bytes / seconds_per_call(same_bytes.sum) / 1e9,
        "weight_read_words_per_s_1_row": 1 / (2 * layers * step[1]),
    }


def schedule_limit(sentences: list) -> dict:
    """The LSTM's matmuls alone on a workload's own schedule, as the exact loop runs them: every
    token's input projection, then a recurrent and a projection call per step at the lane plan's
    row counts, for each of the 2 x L layers: the steps, and the words/s these matmuls allow."""
    import torch

    from spacy_elmo.kernels.lstm_steps import LanePlan, Scratch, lane_multiple, step_lanes_for

    config, matmuls = original_step_matmuls()
    lengths = [len(sentence) + 2 for sentence in sentences]  # with the sentence boundaries
    # as the backend picks it where rows do not depend on the row count (``Backend.step_width``)
    width = step_lanes_for(lengths, matmuls.matmuls.blocking.step_lanes, config.lstm_dim)
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

        seconds = seconds_per_call(one_layer, runs=3)
    words = sum(len(sentence) for sentence in sentences)
    return {"schedule_steps_64": plan.n_steps, "lstm_schedule_words_per_s_64": words / (2 * config.n_layers * seconds)}


# Ours under other torches (--pythons).


def run_torches(peer: Optional[Path], weights: Path, pythons: List[str], args, workloads: List[str]) -> dict:
    """fp32 (cache off) under each Python against one peer run per workload."""
    rows = []
    for workload in workloads:
        path, repeats = sentences_file(workload), args.repeats or 5
        theirs = run_peer(peer, path, "plain", repeats, args.threads) if peer else None
        spec = {"weights": str(weights), "sentences": str(path), "cache": False, "threads": args.threads}
        for python in pythons:
            mine = run_worker(__file__, {**spec, "repeats": repeats, "precision": "fp32"}, python=python)
            rows.append({**row(workload, "fp32", "off", mine, theirs), "torch": mine["torch"]})
    return {"machine": machine(args.threads), "date": time.strftime("%Y-%m-%d"), "rows": rows}


# The section of BENCHMARKS.md and the plot.


def plot(report: dict, name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r.get("ratio")]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    if rows:
        labels = [f"{r['workload']}\n{precision_label(r)}, cache {r['cache']}" for r in rows]
        ratios = [r["ratio"] for r in rows]
        bars = ax.bar(labels, ratios, color=["#1f77b4" if r >= 1 else "#d62728" for r in ratios])
        ax.axhline(1.0, color="#444444", linewidth=1)
        for bar, ratio in zip(bars, ratios, strict=True):
            ax.text(bar.get_x() + bar.get_width() / 2, ratio, f"{ratio:.2f}x", ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("words/s of ours / words/s of AllenNLP")
    else:  # ours alone: its words/s
        labels = [f"{r['workload']}\n{precision_label(r)}, cache {r['cache']}" for r in report["rows"]]
        ax.bar(labels, [r["ours"]["words_per_s"] for r in report["rows"]], color="#1f77b4")
        ax.set_ylabel("words/s of ours (no peer in this run)")
    capped = f" (CAPPED at {report['capped']}: simulating a lesser CPU)" if report.get("capped") else ""
    ax.set_title(f"elmo component vs AllenNLP Elmo, same weights and run{capped}\n{report['machine']}", fontsize=8)
    ax.tick_params(axis="x", labelsize=6)
    save_figure(fig, figure_path(name))


def precision_label(row: dict) -> str:
    """The precision asked for, and what ran where the machine fell back to exact fp32."""
    runs = row["ours"].get("runs", row["precision"])
    return row["precision"] if runs == row["precision"] else f"{row['precision']} (fell back: ran {runs})"


def rate(figures: Optional[dict]) -> str:
    """words/s, with the runs' spread where the results have it."""
    if not figures:
        return "-"
    spread = f" ±{100 * figures['spread'] / 2:.0f}%" if "spread" in figures else ""
    return f"{figures['words_per_s']:,.1f}{spread}"


def command_of(report: dict) -> str:
    """The run's command line; results from before the suite kept none: rebuilt from their options."""
    if "command" in report:
        return f"`{report['command']}`"
    if report["rows"] and "torch" in report["rows"][0]:
        return "`python bench/peer.py PEER_DIR --pythons PYTHON_A PYTHON_B`"
    cap, label = report.get("capped"), report.get("label")
    options = (f" --cap {cap}" if cap else "") + (f" --label {label}" if label else "")
    return f"`python bench/peer.py PEER_DIR{options}`"


def section_lines(report: dict, name: str) -> list:
    cap, label = report.get("capped"), report.get("label")
    title = f"capped at {cap}, simulating a lesser CPU" if cap else "uncapped"
    simulated = (
        f"**Capped**: oneDNN, ATen and MKL limited to {cap} ({', '.join(SIMULATED_CPUS[cap])}), both sides alike: "
        "that CPU class's kernels, not its clock, caches or memory. "
        if cap
        else ""
    )
    present = {r["workload"] for r in report["rows"]}
    lines = [
        f"### Against the peer (AllenNLP `Elmo`) on CPU, {f'{label}, ' if label else ''}{title} ({report['date']})",
        "",
        f"{simulated}Machine: {report['machine']}. Workloads: {', '.join(w for w in WORKLOADS if w in present)}; "
        "the peer's full-size random weights, converted; ours through `nlp.pipe`, the peer in batches of 64; "
        "cache warm = our token cache / AllenNLP's `vocab_to_cache` holding the workload's words. words/s: "
        "median of 5 runs (3 at 1,000 sentences) after a warm-up (± half the runs' spread where recorded), "
        f"each configuration in its own process; rows measured {measured_span(report)}. Command: "
        f"{command_of(report)}. bf16 and int8 carry their error against our fp32, per layer: max abs "
        "difference (of the largest fp32 value), lowest cosine.",
        "",
        "| workload | precision | cache | ours (words/s) | AllenNLP (words/s) | ratio | ours / AllenNLP peak RSS (MB) "
        "| error vs fp32 (layers 0 / 1 / 2) |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        error = " / ".join(
            f"{e['max_abs']:.1e} (of {e['max_abs_fp32']:.2f}), cos {e['min_cosine']:.5f}"
            for e in r["ours"].get("error", [])
        )
        ratio = f"**{r['ratio']:.2f}x**" if r.get("ratio") else "-"
        theirs_rss = f"{r['peer']['peak_rss_mb']:,.0f}" if r.get("peer") else "-"
        lines.append(
            f"| {r['workload']} | {precision_label(r)} | {r['cache']} | {rate(r['ours'])} | {rate(r.get('peer'))} | "
            f"{ratio} | {r['ours']['peak_rss_mb']:,.0f} / {theirs_rss} | {error or '-'} |"
        )
    if "roof" in report:
        lines += ["", *roof_lines(report, name)]
    return lines + ["", figure_link(name)]


def roof_lines(report: dict, name: str) -> list:
    """How the exact path stands against this machine's roof."""
    roof = report["roof"]
    lines = [
        f"fp32 roof: a 4096x4096 by 4096x512 matmul runs at {roof['gemm_gflops']:.0f} GFLOP/s here; one word through "
        f"the biLM is {roof['flop_per_word'] / 1e6:.0f} MFLOP, so the roof is {roof['roof_words_per_s']:,.0f} words/s."
    ]
    if "step_gflops_64_rows" not in roof:
        return lines
    chars = roof["flop_per_word"] - lstm_flop_per_word()
    exact = {r["workload"]: r for r in report["rows"] if r["precision"] == "fp32" and r["cache"] == "off"}
    parts = []
    for workload, r in exact.items():
        share, words_per_s = r["ours"]["distinct_share"], r["ours"]["words_per_s"]
        flop = lstm_flop_per_word() + chars * share
        parts.append(
            f"{workload}: distinct tokens {100 * share:.0f}% of those read, {flop / 1e6:.0f} MFLOP a word, "
            f"{100 * words_per_s / roof['roof_words_per_s']:.0f}% of the roof, "
            f"{100 * words_per_s * flop / 1e9 / roof['gemm_gflops']:.0f}% of the GEMM rate on what it runs"
        )
    limits = (
        f"The step loop's own matmuls (`roof` in bench/results/{name}.json): at 64 rows "
        f"{roof['step_gflops_64_rows']:.0f} GFLOP/s, so the LSTM's matmuls alone allow "
        f"{roof['lstm_words_per_s_64_rows']:,.0f} words/s; at one row each step reads the layer's fp32 weights "
        f"({roof['step_weight_mb']:.0f} MB) at {roof['step_gb_per_s_1_row']:.1f} GB/s (a sum over as many bytes: "
        f"{roof.get('read_gb_per_s', float('nan')):.1f} GB/s), which allows "
        f"{roof['weight_read_words_per_s_1_row']:,.0f} words/s."
    )
    if "lstm_schedule_words_per_s_64" in roof:
        limits += (
            f" On the 64-sentence workload's own schedule ({roof['schedule_steps_64']} steps) they allow "
            f"{roof['lstm_schedule_words_per_s_64']:,.0f} words/s."
        )
    return lines + [
        "",
        "The char encoder runs once per distinct token of a call, so the exact path runs fewer FLOP a word than "
        "the roof counts. " + "; ".join(parts) + ".",
        "",
        limits,
    ]


def measured_span(report: dict) -> str:
    """When the rows were measured (a run, or a run and reruns of chosen rows)."""
    return ", ".join(sorted({r.get("measured", report["date"]) for r in report["rows"]}))


def torch_section_lines(report: dict) -> list:
    lines = [
        f"### Against the peer under other torches (fp32, uncapped, {report['date']})",
        "",
        f"Machine: {report['machine'].split(', torch')[0]}; ours under each row's torch, full-size weights, exact "
        "fp32, token cache off; AllenNLP `Elmo` in its own venv, once per workload in the same run. Command: "
        f"{command_of(report)}.",
        "",
        "| workload | our torch | ours (words/s) | AllenNLP (words/s) | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for r in report["rows"]:
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") else "-"
        lines.append(f"| {r['workload']} | {r['torch']} | {rate(r['ours'])} | {rate(r.get('peer'))} | {ratio} |")
    return lines


def write_outputs(report: dict, name: str) -> None:
    if name.endswith("-torch"):
        write_section(f"peer:{name}", torch_section_lines(report))
        return
    plot(report, name)
    write_section(f"peer:{name}", section_lines(report, name))


# The command line.


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", nargs="?", help="the folder setup.sh built (venv/ and full/); none: ours alone")
    parser.add_argument("--weights", help="ours on these weights (default: the peer's, converted)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workloads", nargs="+", help="sentence counts (1 16 64 1000); rows of others are kept")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--caches", nargs="+", default=list(CACHES), choices=CACHES, help="fp32's token cache")
    parser.add_argument("--repeats", type=int, help="timed runs after the warm-up (default 5; 3 at 1,000)")
    parser.add_argument("--no-roof", action="store_true", help="leave out the machine's roof (about 10 s)")
    parser.add_argument("--cap", choices=sorted(SIMULATED_CPUS), help="kernels capped at this ISA (a lesser CPU)")
    parser.add_argument("--label", help="this machine's results under their own name (peer-cpu-LABEL), e.g. zen3")
    parser.add_argument("--pythons", nargs="*", help="ours in fp32 under each of these Pythons (other torches)")
    parser.add_argument("--render-only", action="store_true", help="the section and plot again from the results")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_arguments()
    if not args.render_only:
        run_capped(args.cap)
    if args.worker:
        worker_reply(ours(json.loads(args.worker)))
        return
    name = "peer-cpu-torch" if args.pythons is not None else result_name("peer-cpu", args.label, args.cap)
    if args.render_only:
        write_outputs(read_results(name), name)
        print(f"Rendered the section peer:{name} from its results.")
        return
    peer = peer_folder(args.peer)
    if peer is None and not args.weights:
        raise SystemExit("Give the peer's folder (PEER_DIR, from ../shared/tools/peer-allennlp/setup.sh) or --weights.")
    weights = Path(args.weights) if args.weights else converted_weights(peer)
    if args.pythons is not None:
        workloads = [workload_named(count) for count in args.workloads] if args.workloads else TORCH_WORKLOADS
        report = run_torches(peer, weights, args.pythons or [sys.executable], args, workloads)
    else:
        workloads = [workload_named(count) for count in args.workloads] if args.workloads else WORKLOADS
        report = run_all(peer, weights, args, workloads)
        report = {**report, **({"label": args.label} if args.label else {})}
        report = merged_with_kept(report, name) if args.workloads else report
        if not args.no_roof:
            report["roof"] = gemm_roof(args.threads)
    report["command"] = command_line("peer.py", peer=args.peer)
    write_results(name, report)
    write_outputs(report, name)
    print(f"Wrote bench/results/{name}.json and the section peer:{name}.")


if __name__ == "__main__":
    main()
