"""Pretraining throughput per preset, with bf16 autocast and torch.compile on and off: tokens/s and
peak memory of `spacy_elmo.training.pretrain` for a fixed number of steps, each configuration in its own process.

    python bench/bench_train_speed.py --device cuda                      # mini, small, original; 4 variants each
    python bench/bench_train_speed.py --presets original --steps 40 --variants bf16

The base settings are training/configs/pretrain-gpu.json (unclipped LSTMs, sampled softmax with 8192
samples, adagrad, batches of 65,536 tokens); the corpus is prepared from shared/data/corpus as
bench_pretrain.py prepares it (or --corpus/--vocab). tokens/s: the median of the log's windows after the
first (which holds the start and any compilation; its length is reported as warm-up). Peak memory:
torch's allocator on the GPU (the log's gpu_peak_mb), the process's RSS on the CPU. A resumed run
equal to an unbroken one is tests/test_training.py's (it runs on the GPU where there is one). Writes
bench/results/train-speed-<device>.json and .png and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import write_section

ROOT = Path(__file__).resolve().parents[1]
OUT, RESULTS = ROOT / "bench" / "out", ROOT / "bench" / "results"
BASE_CONFIG = ROOT / "training" / "configs" / "pretrain-gpu.json"
PRESETS = ("mini", "small", "original")
VARIANTS = {"fp32": (False, False), "bf16": (True, False), "fp32+compile": (False, True), "bf16+compile": (True, True)}
sys.path.insert(0, str(ROOT))


def measure(preset: str, variant: str, corpus: Path, vocab: Path, steps: int, log_every: int) -> dict:
    """One run of ``steps`` steps; its throughput, warm-up and peak memory (or why it failed)."""
    bf16, compiled = VARIANTS[variant]
    run = OUT / f"train-speed-{preset}-{variant.replace('+', '-')}"
    settings = {
        "corpus": str(corpus),
        "vocab": str(vocab),
        "preset": preset,
        "bf16": bf16,
        "compile": compiled,
        "max_steps": steps,
        "log_every": log_every,
        "eval_every": 10**9,
        "eval_tokens": 2000,
        "checkpoint_every": 10**9,
        "checkpoint_minutes": 10**6,
    }
    command = [sys.executable, "-m", "spacy_elmo.training.pretrain", str(BASE_CONFIG), "--output", str(run)]
    command += [f"--set={key}={json.dumps(value)}" for key, value in settings.items()]
    if run.exists():
        import shutil

        shutil.rmtree(run)
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        return {"preset": preset, "variant": variant, "failed": done.stderr[-2500:]}
    lines = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    windows = [line for line in lines if "tokens_per_s" in line]
    return {
        "preset": preset,
        "variant": variant,
        "steps": windows[-1]["step"],
        "tokens_per_s": statistics.median(w["tokens_per_s"] for w in windows[1:]),
        "warmup_s": windows[0]["elapsed"],
        "peak_gpu_mb": max((w.get("gpu_peak_mb", 0.0) for w in windows), default=0.0),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "wall_s": time.time() - started,
        "final_loss": windows[-1]["loss"],
    }


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    from spacy_elmo.kernels.machine import cpu_description

    return f"{cpu_description()}, torch {torch.__version__}"


def plot(report: dict, path: Path) -> None:
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def update_markdown(report: dict) -> None:
    device = report["device"]
    memory = "peak GPU MB" if device == "cuda" else "peak RSS MB"
    lines = [
        f"### Pretraining throughput on {device.upper()} ({report['date']})",
        "",
        f"Machine: {report['machine']}. Settings of training/configs/pretrain-gpu.json (unclipped, sampled softmax "
        "8192, adagrad, 65,536 tokens a step) with the preset and the variant changed; "
        f"{report['steps']} steps each, tokens/s the median of the log's windows after the first (warm-up: the "
        "first window's seconds, compilation included). Command: `python bench/bench_train_speed.py --device "
        f"{device}`.",
        "",
        f"| preset | variant | tokens/s | warm-up (s) | {memory} |",
        "|---|---|---:|---:|---:|",
    ]
    for r in report["rows"]:
        if "failed" in r:
            lines.append(f"| {r['preset']} | {r['variant']} | failed | | |")
            continue
        peak = r["peak_gpu_mb"] if device == "cuda" else r["peak_rss_mb"]
        lines.append(
            f"| {r['preset']} | {r['variant']} | {r['tokens_per_s']:,.0f} | {r['warmup_s']:.1f} | {peak:,.0f} |"
        )
    lines += ["", f"![pretraining throughput](bench/results/train-speed-{device}.png)", ""]
    write_section(f"bench_train_speed:{device}", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--log-every", type=int, default=5)
    parser.add_argument("--corpus", type=Path, help="from spacy_elmo.training.corpus; default: shared/data's")
    parser.add_argument("--vocab", type=Path, help="its vocabulary; default: 30,000 words of its training split")
    args = parser.parse_args()
    import torch

    if (args.device == "cuda") != torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}, but torch.cuda.is_available() is {torch.cuda.is_available()}.")
    if args.corpus is None:
        from bench_pretrain import prepare

        args.corpus, args.vocab = prepare(30000), OUT / "vocab-30000.txt"
    report = {
        "device": args.device,
        "machine": device_name(args.device),
        "date": time.strftime("%Y-%m-%d"),
        "steps": args.steps,
        "rows": [],
    }
    for preset in args.presets:
        for variant in args.variants:
            row = measure(preset, variant, args.corpus, args.vocab, args.steps, args.log_every)
            report["rows"].append(row)
            figures = f"{row['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in row else "FAILED " + row["failed"]
            print(f"{preset:>8} {variant:>13}: {figures}", flush=True)
            write_outputs(report)  # after every row: a run cut short keeps what it measured


def write_outputs(report: dict) -> None:
    from spacy_elmo.files import atomic_write_json

    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS / f"train-speed-{report['device']}.json", report)
    plot(report, RESULTS / f"train-speed-{report['device']}.png")
    update_markdown(report)


if __name__ == "__main__":
    main()
