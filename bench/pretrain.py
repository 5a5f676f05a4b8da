"""Pretraining measured: the perplexity a biLM reaches in a fixed time (``perplexity``), the training
throughput per preset and variant (``speed``), and the network the workflow's minutes on a CPU are
best spent on (``sweep``).

    python bench/pretrain.py perplexity                  # CPU: training/configs/pretrain-cpu.json, 30 minutes
    python bench/pretrain.py perplexity --device cuda --minutes 20 --config training/configs/pretrain-gpu.json
    python bench/pretrain.py speed --device cuda         # mini, small, original; 4 variants each
    python bench/pretrain.py speed --device cuda --presets original --steps 40 --variants bf16
    python bench/pretrain.py sweep                       # every candidate, 9 minutes each, the workflow's text
    python bench/pretrain.py sweep --candidates small-before,e256-p64 --minutes 60
    python bench/pretrain.py perplexity|speed|sweep --render-only [--device D]   # a section again, from its file
    python bench/pretrain.py --render-only               # every section whose results file is there

``perplexity``: a biLM trained (``spacy_elmo.training.pretrain``) for ``--minutes`` on
shared/data/corpus, then its full-softmax perplexity on the whole valid and test text beside a
unigram model's; the learning curve; the median of the log's tokens/s.

``speed``: ``--steps`` steps of each preset with bf16 autocast and torch.compile on and off, over
the settings of training/configs/pretrain-gpu.json (unclipped LSTMs, sampled softmax with 8192
samples, adagrad, 65,536 tokens a step): tokens/s, the median of the log's windows after the first
(which holds the start and any compilation: its seconds are the warm-up); peak memory, torch's
allocator on a GPU (the log's gpu_peak_mb), the process's RSS on a CPU. Needs a CUDA GPU for its
default ``--device cuda``; ``--device cpu`` runs the same on the CPU.

``sweep``: each candidate network and settings trained for ``--minutes`` on this machine's cores
(the first 10,000 dev tokens evaluated every minute), then scored with the full softmax on the
whole dev and test splits. A finished candidate is kept in bench/out/sweep/ and not run again
(``--fresh`` runs it again).

A configuration (``speed``) or candidate (``sweep``) runs in a process of its own where a run has
several; one alone runs in the script's process. The corpus: ``--corpus`` (prepared by
spacy_elmo.training.corpus) and ``--vocab`` (default: the corpus's vocab.txt); without them,
``perplexity`` and ``speed`` prepare shared/data/corpus, ``sweep`` the workflow's built-in text, in
bench/out/. Writes bench/results/pretrain-<device>.json and .png, train-speed-<device>.json and
.png, sweep-cpu.json and .png, and their sections "pretrain:<that name>" of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from suite.report import (
    OUT,
    RESULTS,
    ROOT,
    command_line,
    figure_link,
    figure_path,
    machine,
    read_results,
    run_worker,
    save_figure,
    shown_command,
    worker_reply,
    write_results,
    write_section,
)
from suite.workloads import CORPUS, peak_rss_mb

CONFIGS = ROOT / "training" / "configs"
DEVICES = ("cpu", "cuda")
SPEED_PRESETS = ("mini", "small", "original")
VARIANTS = {"fp32": (False, False), "bf16": (True, False), "fp32+compile": (False, True), "bf16+compile": (True, True)}
SWEEP_OUT = OUT / "sweep"

_QUARTER_FILTERS = [[1, 8], [2, 8], [3, 16], [4, 32], [5, 64], [6, 128], [7, 256]]  # 512, the original's shape / 4
_EIGHTH_FILTERS = [[1, 4], [2, 4], [3, 8], [4, 16], [5, 32], [6, 64], [7, 128]]  # 256
# Settings every candidate shares: the workflow's evaluation pace and checkpointing.
COMMON: Dict[str, Any] = dict(
    eval_every=0, eval_minutes=1.0, eval_tokens=10000, log_every=10, checkpoint_every=100000, checkpoint_minutes=100.0
)
BEFORE: Dict[str, Any] = dict(
    preset="small", softmax="sampled", n_samples=1024, optimizer="adam", lr=0.001, dropout=0.1, batch_tokens=4096
)
SCHEDULED: Dict[str, Any] = dict(BEFORE, lr=0.003, lr_schedule="warmup-cosine", warmup=0.05, final_lr=0.1)


def _shape(filters: List[List[int]], lstm_dim: int, projection_dim: int) -> Dict[str, Any]:
    return {"model": dict(filters=filters, lstm_dim=lstm_dim, projection_dim=projection_dim)}


# name -> (what it tries, its settings over COMMON)
CANDIDATES: Dict[str, tuple] = {
    "small-before": ("the workflow's biLM before: small preset, adam 1e-3 constant", BEFORE),
    "small-scheduled": ("small preset with the time schedule (peak 3e-3)", SCHEDULED),
    "q512-p128": ("filters / 4, LSTM 512, projection 128", dict(SCHEDULED, **_shape(_QUARTER_FILTERS, 512, 128))),
    "q512-p128-full": (
        "as q512-p128, full softmax",
        dict(SCHEDULED, softmax="full", **_shape(_QUARTER_FILTERS, 512, 128)),
    ),
    "q512-p128-lr6e-3": ("as q512-p128, peak lr 6e-3", dict(SCHEDULED, lr=0.006, **_shape(_QUARTER_FILTERS, 512, 128))),
    "e512-p128": ("filters / 8, LSTM 512, projection 128", dict(SCHEDULED, **_shape(_EIGHTH_FILTERS, 512, 128))),
    "q512-p256": ("filters / 4, LSTM 512, projection 256", dict(SCHEDULED, **_shape(_QUARTER_FILTERS, 512, 256))),
    "e256-p64": ("filters / 8, LSTM 256, projection 64", dict(SCHEDULED, **_shape(_EIGHTH_FILTERS, 256, 64))),
    "e256-p64-lr6e-3": ("as e256-p64, peak lr 6e-3", dict(SCHEDULED, lr=0.006, **_shape(_EIGHTH_FILTERS, 256, 64))),
}


def main() -> None:
    args = parse_arguments()
    if args.command is None:
        render_every_section()
    elif args.worker:
        worker_reply(WORKERS[args.command](json.loads(args.worker)))
    elif args.render_only:
        name = results_name(args.command, getattr(args, "device", "cpu"))
        RENDERERS[args.command](read_results(name))
    else:
        MEASUREMENTS[args.command](args)


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render-only", action="store_true", help="every section again, from the results files")
    commands = parser.add_subparsers(dest="command")
    corpus = argparse.ArgumentParser(add_help=False)
    corpus.add_argument("--corpus", type=Path, help="a corpus prepared by spacy_elmo.training.corpus")
    corpus.add_argument("--vocab", type=Path, help="its vocabulary (default: the corpus's vocab.txt)")
    corpus.add_argument("--render-only", action="store_true", help="the section again, from the results file")
    corpus.add_argument("--worker", help=argparse.SUPPRESS)

    perplexity = commands.add_parser("perplexity", parents=[corpus], help="perplexity after a fixed training time")
    perplexity.add_argument("--device", default="cpu", choices=DEVICES)
    perplexity.add_argument("--config", type=Path, default=CONFIGS / "pretrain-cpu.json")
    perplexity.add_argument(
        "--minutes", type=float, default=30.0, help="training time (0: none, the config's max_steps)"
    )
    perplexity.add_argument("--vocab-size", type=int, default=30000, help="of the vocabulary made without --vocab")
    perplexity.add_argument("--reuse", action="store_true", help="evaluate bench/out's run again, no training")

    speed = commands.add_parser("speed", parents=[corpus], help="training tokens/s per preset and variant")
    speed.add_argument("--device", default="cuda", choices=DEVICES)
    speed.add_argument("--config", type=Path, default=CONFIGS / "pretrain-gpu.json", help="the settings changed")
    speed.add_argument("--presets", nargs="+", default=list(SPEED_PRESETS), help="BiLMConfig presets")
    speed.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    speed.add_argument("--steps", type=int, default=30)
    speed.add_argument("--log-every", type=int, default=5)

    sweep = commands.add_parser("sweep", parents=[corpus], help="the best network for a CPU's minutes")
    sweep.add_argument("--minutes", type=float, default=9.0, help="training time of each candidate")
    sweep.add_argument("--candidates", default=",".join(CANDIDATES), help="comma-separated names (default: all)")
    sweep.add_argument("--fresh", action="store_true", help="run candidates again even where a result is kept")
    args = parser.parse_args()
    if args.command is None and not args.render_only:
        parser.error("choose perplexity, speed or sweep (or --render-only alone: every section again)")
    return args


def results_name(command: str, device: str = "cpu") -> str:
    return {"perplexity": f"pretrain-{device}", "speed": f"train-speed-{device}", "sweep": "sweep-cpu"}[command]


def render_every_section() -> None:
    for command, devices in (("perplexity", DEVICES), ("speed", DEVICES), ("sweep", ("cpu",))):
        for device in devices:
            if (RESULTS / f"{results_name(command, device)}.json").is_file():
                RENDERERS[command](read_results(results_name(command, device)))


def prepared_corpus(args: argparse.Namespace, make: Callable[[], Tuple[Path, Path]]) -> Tuple[Path, Path]:
    """(corpus, vocabulary): the ones given (the vocabulary by default the corpus's vocab.txt), else
    ``make()``'s."""
    corpus, vocab = (args.corpus, args.vocab or args.corpus / "vocab.txt") if args.corpus else make()
    if not (corpus / "manifest.json").is_file() or not vocab.is_file():
        raise SystemExit(f"{corpus} is no prepared corpus (manifest.json) with a vocabulary at {vocab}.")
    return corpus, vocab


def shared_corpus(vocab_size: int) -> Tuple[Path, Path]:
    """shared/data/corpus prepared once into bench/out (spaCy's English tokenizer and sentencizer),
    with the ``vocab_size`` most frequent training words."""
    from spacy_elmo.training.corpus import MANIFEST, prepare_corpus, read_sentences
    from spacy_elmo.training.vocab import Vocabulary

    corpus = OUT / "corpus"
    if not (corpus / MANIFEST).exists():
        splits = {"train": [CORPUS / "train.txt"], "dev": [CORPUS / "valid.txt"], "test": [CORPUS / "test.txt"]}
        prepare_corpus(corpus, splits, pipeline="en")
    vocab = OUT / f"vocab-{vocab_size}.txt"
    if not vocab.exists():
        Vocabulary.from_sentences(read_sentences(corpus / "train"), vocab_size).save(vocab)
    return corpus, vocab


def train_run(config: Optional[Path], settings: Dict[str, Any], run: Path) -> List[Dict[str, Any]]:
    """A fresh run of ``spacy_elmo.training.pretrain`` in this process: the config's settings with
    ``settings`` over them; the lines of its log."""
    from spacy_elmo.training.loop.train_config import TrainConfig
    from spacy_elmo.training.pretrain import train

    shutil.rmtree(run, ignore_errors=True)
    train(TrainConfig.load(config, [f"{key}={json.dumps(value)}" for key, value in settings.items()]), run)
    return log_lines(run)


def log_lines(run: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]


def throughput(records: List[Dict[str, Any]]) -> Dict[str, float]:
    """The training log's tokens/s: the median of its windows after the first (the start, any
    compilation) and their spread (slowest minus fastest over the median)."""
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    rates = rates[1:] or rates
    median = statistics.median(rates)
    return {"tokens_per_s": median, "tokens_per_s_spread": (max(rates) - min(rates)) / median}


def result_of(command: str, spec: Dict[str, Any], several: bool) -> Dict[str, Any]:
    """A configuration's result: in a process of its own where a run has several, else in this one."""
    if not several:
        return WORKERS[command](spec)
    return run_worker(__file__, spec, arguments=[command])


def shown_path(path: Path) -> str:
    """A path as a section shows it: from the repository's root where it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def with_spread(figure: str, spread: Optional[float]) -> str:
    return figure + (f" ({spread:.0%})" if spread is not None else "")


# --- perplexity -----------------------------------------------------------------------------------


def measure_perplexity(args: argparse.Namespace) -> None:
    import torch

    from spacy_elmo.training.corpus import read_sentences
    from spacy_elmo.training.evaluate import evaluate
    from spacy_elmo.training.vocab import Vocabulary

    corpus, vocab = prepared_corpus(args, lambda: shared_corpus(args.vocab_size))
    run = OUT / f"run-{args.device}"
    if args.reuse:
        records = log_lines(run)
    else:
        settings = {"corpus": str(corpus), "vocab": str(vocab), "max_minutes": args.minutes, "device": args.device}
        records = train_run(args.config, settings, run)
    dev, test = (evaluate(run, read_sentences(corpus / split), device=args.device) for split in ("dev", "test"))
    last, rates = [r for r in records if "loss" in r][-1], throughput(records)
    splits = json.loads((corpus / "manifest.json").read_text())["splits"]
    result = {
        "device": args.device,
        "machine": machine(torch.get_num_threads(), args.device),
        "date": time.strftime("%Y-%m-%d"),
        "config": json.loads((run / "train-config.json").read_text()),
        "command": command_line("pretrain.py", dropped=("--reuse",)),
        "corpus_source": str(args.corpus) if args.corpus else "shared/data/corpus",
        "vocab_size": len(Vocabulary.load(vocab)),
        "minutes_training": last["elapsed"] / 60,
        "steps": last["step"],
        "tokens": last["tokens"],
        "tokens_per_s_median": rates["tokens_per_s"],
        "tokens_per_s_spread": rates["tokens_per_s_spread"],
        "valid": dev,
        "test": test,
        "corpus": {split: figures["tokens"] for split, figures in splits.items()},
        "curve": [{k: r[k] for k in ("step", "tokens", "elapsed", "train_ppl", "dev_ppl") if k in r} for r in records],
    }
    write_results(results_name("perplexity", args.device), result)
    render_perplexity(result)
    print(f"{result['steps']} steps, {result['tokens']:,} tokens, {result['tokens_per_s_median']:,.0f} tokens/s")
    unigram = dev["unigram_perplexity"]
    print(f"valid perplexity {dev['perplexity']:.1f} (unigram {unigram:.1f}); test {test['perplexity']:.1f}")


def render_perplexity(result: Dict[str, Any]) -> None:
    device, config, dev, test = result["device"], result["config"], result["valid"], result["test"]
    name = results_name("perplexity", device)
    plot_perplexity(result, name)
    sampled = f" with {config['n_samples']} samples" if config["softmax"] == "sampled" else ""
    vocab_size = result.get("vocab_size", 30000)  # results from before the suite: the default 30,000
    corpus = result.get("corpus_source", "shared/data/corpus")
    machine_line = f"Machine: {result['machine']}. " if "machine" in result else ""
    speed = with_spread(f"{result['tokens_per_s_median']:,.0f}", result.get("tokens_per_s_spread"))
    command = shown_command(result["command"])
    lines = [
        f"### biLM pretraining on {device.upper()} ({result['date']})",
        "",
        f"{machine_line}`{config['preset']}` preset (plus {config['model'] or 'no changes'}), {config['softmax']} "
        f"softmax{sampled}, {config['optimizer']} (lr {config['lr']}), batches of {config['batch_tokens']} tokens, "
        f"dropout {config['dropout']}; vocabulary: the {vocab_size - 3:,} most frequent training words plus `<S>`, "
        f"`</S>`, `<UNK>`. Corpus: {corpus} train / valid / test ({result['corpus']['train']:,} / "
        f"{result['corpus']['dev']:,} / {result['corpus']['test']:,} tokens after spaCy's English tokenizer and "
        f"sentencizer). Command: `{command}`.",
        "",
        "| | value |",
        "|---|---:|",
        f"| training time | {result['minutes_training']:.1f} min ({result['steps']:,} steps) |",
        f"| tokens seen | {result['tokens']:,} |",
        f"| throughput (median of the log's windows) | {speed} tokens/s |",
        f"| valid perplexity (forward / backward / average) | {dev['perplexity_forward']:.1f} / "
        f"{dev['perplexity_backward']:.1f} / **{dev['perplexity']:.1f}** |",
        f"| valid perplexity of a unigram model | {dev['unigram_perplexity']:.1f} |",
        f"| test perplexity (average) / unigram | {test['perplexity']:.1f} / {test['unigram_perplexity']:.1f} |",
        f"| valid out-of-vocabulary rate | {dev['oov_rate']:.2%} |",
        "",
        "Perplexity: full softmax, exp of the mean NLL over the forward and the backward predictions.",
        "",
        figure_link(name),
        "",
    ]
    write_section(f"pretrain:{name}", lines)


def plot_perplexity(result: Dict[str, Any], name: str) -> None:
    """The learning curve from the results' log lines (results from before the suite kept none:
    their plot stays as it was drawn)."""
    if "curve" not in result:
        return
    from spacy_elmo.training.loop.curve import plot_learning_curve

    title = f"{result['config']['preset']} preset, {result['device'].upper()}, {result['minutes_training']:.0f} min"
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "log.jsonl"
        log.write_text("".join(json.dumps(record) + "\n" for record in result["curve"]))
        plot_learning_curve(log, figure_path(name), baseline=result["valid"]["unigram_perplexity"], title=title)


# --- speed ----------------------------------------------------------------------------------------


def measure_speed(args: argparse.Namespace) -> None:
    import torch

    from spacy_elmo import PRESETS

    if (args.device == "cuda") != torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}, but torch.cuda.is_available() is {torch.cuda.is_available()}.")
    unknown = sorted(set(args.presets) - set(PRESETS))
    if unknown:
        raise SystemExit(f"Unknown presets {unknown}; known: {sorted(PRESETS)}.")
    corpus, vocab = prepared_corpus(args, lambda: shared_corpus(30000))
    cuda = f", CUDA {torch.version.cuda}" if args.device == "cuda" else ""
    report = {
        "device": args.device,
        "machine": machine(torch.get_num_threads(), args.device) + cuda,
        "date": time.strftime("%Y-%m-%d"),
        "steps": args.steps,
        "config": shown_path(args.config),
        "command": command_line("pretrain.py"),
        "rows": [],
    }
    specs = [
        {"preset": preset, "variant": variant, "corpus": str(corpus), "vocab": str(vocab), "config": str(args.config)}
        | {"steps": args.steps, "log_every": args.log_every, "device": args.device}
        for preset in args.presets
        for variant in args.variants
    ]
    for spec in specs:  # one at a time, the results written after each: a run cut short keeps what it measured
        row = speed_row(spec, several=len(specs) > 1)
        report["rows"].append(row)
        figures = f"{row['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in row else "FAILED " + row["failed"]
        print(f"{spec['preset']:>8} {spec['variant']:>13}: {figures}", flush=True)
        write_results(results_name("speed", args.device), report)
        render_speed(report)


def speed_row(spec: Dict[str, Any], several: bool) -> Dict[str, Any]:
    try:
        return result_of("speed", spec, several)
    except SystemExit as failure:  # the worker died (out of memory, a crash in a kernel)
        return {"preset": spec["preset"], "variant": spec["variant"], "failed": str(failure)[-2500:]}


def train_for_speed(spec: Dict[str, Any]) -> Dict[str, Any]:
    """One configuration's ``steps`` steps, in this process: its throughput, warm-up and peak memory,
    or why it failed."""
    bf16, compiled = VARIANTS[spec["variant"]]
    settings = {
        **{"corpus": spec["corpus"], "vocab": spec["vocab"], "preset": spec["preset"], "device": spec["device"]},
        **{"bf16": bf16, "compile": compiled, "max_steps": spec["steps"], "log_every": spec["log_every"]},
        **{"eval_every": 10**9, "eval_tokens": 2000, "checkpoint_every": 10**9, "checkpoint_minutes": 10**6},
    }
    run = OUT / f"train-speed-{spec['preset']}-{spec['variant'].replace('+', '-')}"
    row: Dict[str, Any] = {"preset": spec["preset"], "variant": spec["variant"]}
    started = time.perf_counter()  # the whole run's seconds, once: no repeated call to time
    try:
        records = train_run(Path(spec["config"]), settings, run)
    except Exception:  # noqa: BLE001  a variant this torch refuses (torch.compile with bf16 autocast did) is a row
        return {**row, "failed": traceback.format_exc()[-2500:]}
    windows = [r for r in records if "tokens_per_s" in r]
    return {
        **row,
        "steps": windows[-1]["step"],
        **throughput(records),
        "warmup_s": windows[0]["elapsed"],
        "peak_gpu_mb": max((w.get("gpu_peak_mb", 0.0) for w in windows), default=0.0),
        "peak_rss_mb": peak_rss_mb(),
        "wall_s": time.perf_counter() - started,
        "final_loss": windows[-1]["loss"],
    }


def render_speed(report: Dict[str, Any]) -> None:
    device = report["device"]
    name = results_name("speed", device)
    plot_speed(report, name)
    memory = "peak GPU MB" if device == "cuda" else "peak RSS MB"
    config = report.get("config", "training/configs/pretrain-gpu.json")
    base = (
        "(unclipped, sampled softmax 8192, adagrad, 65,536 tokens a step) "
        if config == "training/configs/pretrain-gpu.json"
        else ""
    )
    command = report.get("command", f"python bench/pretrain.py speed --device {device}")
    lines = [
        f"### Pretraining throughput on {device.upper()} ({report['date']})",
        "",
        f"Machine: {report['machine']}. Settings of {config} {base}with the preset and the variant changed; "
        f"{report['steps']} steps each, tokens/s the median of the log's windows after the first (in brackets their "
        "spread, slowest minus fastest over the median; warm-up: the first window's seconds, compilation included). "
        f"Command: `{command}`.",
        "",
        f"| preset | variant | tokens/s | warm-up (s) | {memory} |",
        "|---|---|---:|---:|---:|",
    ]
    for r in report["rows"]:
        if "failed" in r:
            lines.append(f"| {r['preset']} | {r['variant']} | failed | | |")
            continue
        peak = r["peak_gpu_mb"] if device == "cuda" else r["peak_rss_mb"]
        speed = with_spread(f"{r['tokens_per_s']:,.0f}", r.get("tokens_per_s_spread"))
        lines.append(f"| {r['preset']} | {r['variant']} | {speed} | {r['warmup_s']:.1f} | {peak:,.0f} |")
    lines += ["", figure_link(name), ""]
    write_section(f"pretrain:{name}", lines)


def plot_speed(report: Dict[str, Any], name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if "tokens_per_s" in r]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar([f"{r['preset']}\n{r['variant']}" for r in rows], [r["tokens_per_s"] for r in rows], color="#1f77b4")
    ax.set_yscale("log")
    ax.set_ylabel("training tokens/s (log scale)")
    ax.set_title(f"pretraining throughput, {report['machine']}", fontsize=9)
    ax.tick_params(axis="x", labelsize=7)
    save_figure(fig, figure_path(name), dpi=110)


# --- sweep ----------------------------------------------------------------------------------------


def measure_sweep(args: argparse.Namespace) -> None:
    import torch

    names = [name for name in args.candidates.split(",") if name]
    unknown = sorted(set(names) - set(CANDIDATES))
    if unknown:
        raise SystemExit(f"Unknown candidates {unknown}; known: {sorted(CANDIDATES)}.")
    corpus, vocab = prepared_corpus(args, workflow_corpus)
    spec = {"corpus": str(corpus), "vocab": str(vocab), "minutes": args.minutes}
    kept = {name: kept_candidate(name, args.minutes) for name in names if not args.fresh}
    to_run = [name for name in names if not kept.get(name)]
    ran = [result_of("sweep", {**spec, "name": name}, several=len(to_run) > 1) for name in to_run]
    by_name = {**{name: result for name, result in kept.items() if result}, **{r["name"]: r for r in ran}}
    splits = json.loads((corpus / "manifest.json").read_text())["splits"]
    report = {
        "machine": machine(torch.get_num_threads()),
        "date": time.strftime("%Y-%m-%d"),
        "minutes": args.minutes,
        "command": command_line("pretrain.py", dropped=("--fresh",)),
        "corpus": " / ".join(f"{name} {split['tokens']:,}" for name, split in splits.items()) + " tokens",
        "corpus_source": shown_path(args.corpus) if args.corpus else "the workflow's corpus",
        "candidates": [by_name[name] for name in names],
    }
    write_results("sweep-cpu", report)
    render_sweep(report)
    for r in sorted(report["candidates"], key=lambda r: r["test"]):
        print(f"{r['name']:>16}  {r['tokens_per_s']:>7,.0f} tok/s  dev {r['dev']:7.1f}  test {r['test']:7.1f}")


def workflow_corpus() -> Tuple[Path, Path]:
    """The workflow's default corpus, made as `spacy project run text corpus vocab` makes it."""
    corpus = SWEEP_OUT / "corpus"
    if not (corpus / "vocab.txt").exists():
        text = SWEEP_OUT / "text"
        steps = [
            ["spacy_elmo.training.builtin_text", "gensim", str(text), "--lang", "en"],
            ["spacy_elmo.training.corpus", str(corpus), "--source", str(text), "--split", "0.96,0.02,0.02"],
            ["spacy_elmo.training.vocab", str(corpus), str(corpus / "vocab.txt"), "--max-size", "20000"],
        ]
        for step in steps:
            subprocess.run([sys.executable, "-m", *step], check=True, cwd=ROOT)
    return corpus, corpus / "vocab.txt"


def kept_candidate(name: str, minutes: float) -> Optional[Dict[str, Any]]:
    """A candidate's result kept from an earlier sweep of the same minutes, if any."""
    kept = SWEEP_OUT / name / "result.json"
    result = json.loads(kept.read_text()) if kept.is_file() else None
    return result if result and result["minutes"] == minutes else None


def train_candidate(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Train one candidate for its minutes, in this process, and score it; its result, kept."""
    from spacy_elmo import load_bilm
    from spacy_elmo.training.corpus import read_sentences
    from spacy_elmo.training.evaluate import evaluate

    name, run = spec["name"], SWEEP_OUT / spec["name"]
    settings = {**COMMON, **CANDIDATES[name][1], "corpus": spec["corpus"], "vocab": spec["vocab"]}
    settings.update(max_minutes=spec["minutes"], device="cpu")
    records = train_run(None, settings, run)
    corpus = Path(spec["corpus"])
    dev, test = (evaluate(run, read_sentences(corpus / split), device="cpu") for split in ("dev", "test"))
    steps = [r for r in records if "loss" in r]
    result = {
        "name": name,
        "tries": CANDIDATES[name][0],
        "settings": settings,
        "minutes": spec["minutes"],
        "parameters": sum(p.numel() for p in load_bilm(run / "bilm").parameters()),
        "steps": steps[-1]["step"],
        "tokens": steps[-1]["tokens"],
        **throughput(records),
        "dev_curve": [[r["elapsed"] / 60, r["dev_ppl"]] for r in records if "dev_ppl" in r],
        "dev": dev["perplexity"],
        "test": test["perplexity"],
        "unigram_test": test["unigram_perplexity"],
    }
    (run / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def render_sweep(report: Dict[str, Any]) -> None:
    rows = sorted(report["candidates"], key=lambda r: r["test"])
    plot_sweep(report)
    machine_named = report["machine"] + (f", torch {report['torch']}" if "torch" in report else "")
    command = shown_command(report["command"])
    source = report.get("corpus_source", "the workflow's corpus")
    lines = [
        f"### Architecture sweep: the best biLM for {report['minutes']:g} minutes ({report['date']})",
        "",
        f"Machine: {machine_named}. Each candidate trained for {report['minutes']:g} minutes on "
        f"{source} ({report['corpus']}), then scored with the full softmax on the whole dev and test splits; every "
        "candidate has the corpus's one vocabulary, so the perplexities compare. Parameters: the biLM without its "
        "softmax. tokens/s: the median over the run's log lines (in brackets their spread, slowest minus fastest "
        f"over the median); on a shared machine it drifts between runs of the same network. Command: `{command}`.",
        "",
        "| candidate | what it tries | parameters | tokens/s | tokens seen | dev ppl | test ppl |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        speed = with_spread(f"{r['tokens_per_s']:,.0f}", r.get("tokens_per_s_spread"))
        lines.append(
            f"| `{r['name']}` | {r['tries']} | {r['parameters'] / 1e6:.2f}M | {speed} | "
            f"{r['tokens']:,} | {r['dev']:.1f} | **{r['test']:.1f}** |"
        )
    lines += [f"| unigram model | | | | | | {rows[0]['unigram_test']:.1f} |", "", figure_link("sweep-cpu"), ""]
    write_section("pretrain:sweep-cpu", lines)


def plot_sweep(report: Dict[str, Any]) -> None:
    """Dev perplexity (the evaluation subset) against minutes, one line per candidate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["candidates"]
    fig, ax = plt.subplots(figsize=(9, 5))
    for result in sorted(results, key=lambda r: r["test"]):
        minutes, ppl = zip(*result["dev_curve"], strict=True)
        ax.plot(minutes, ppl, marker="o", markersize=3, label=f"{result['name']} (test {result['test']:.0f})")
    ax.axhline(results[0]["unigram_test"], color="#888888", linestyle="--", label="unigram model (test)")
    where = report["machine"].split(";")[0] + ")"  # the CPU and its cores
    title = f"{report['minutes']:g} minutes per candidate on {where}"
    ax.set(yscale="log", xlabel="minutes of training", ylabel="dev perplexity (first 10k tokens)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, figure_path("sweep-cpu"), dpi=110)


MEASUREMENTS = {"perplexity": measure_perplexity, "speed": measure_speed, "sweep": measure_sweep}
RENDERERS = {"perplexity": render_perplexity, "speed": render_speed, "sweep": render_sweep}
WORKERS = {"speed": train_for_speed, "sweep": train_candidate}

if __name__ == "__main__":
    main()
