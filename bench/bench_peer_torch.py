"""The peer ratio across torch versions: this project's fp32 words/s at one sentence and at 64
sentences under each given Python (a venv with another torch), against AllenNLP `Elmo` (its own venv,
its own torch) in the same run, on the same full-size weights and sentences (bench_peer.py's workloads).

    python bench/bench_peer_torch.py PEER_DIR VENV_PYTHON [VENV_PYTHON ...]
    python bench/bench_peer_torch.py /tmp/peer ~/.cache/venv-t251/bin/python ~/.cache/venv-t2150/bin/python

Writes bench/results/peer-cpu-torch.json and its section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import bench_peer
from report import machine, write_section

WORKLOADS = ["1 sentence", "64 sentences"]


def ours_under(python: str, spec: dict) -> dict:
    """bench_peer's worker (ours, one configuration) run by ``python``, and that Python's torch."""
    worker = [python, bench_peer.__file__, "--worker", json.dumps(spec)]
    done = subprocess.run(worker, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{python} failed:\n{done.stderr[-3000:]}")
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "torch": version.stdout.strip()}


def run(peer: Path, pythons: list, threads: int) -> dict:
    weights = bench_peer.converted_weights(peer)
    bench_peer.OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for workload in WORKLOADS:
        sentences = bench_peer.OUT / f"peer-{workload.split()[0]}.json"
        sentences.write_text(json.dumps(bench_peer.workload_sentences(workload)))
        theirs = bench_peer.run_peer(peer, sentences, "plain", 5, threads)
        for python in pythons:
            spec = {"weights": str(weights), "sentences": str(sentences), "cache": False, "threads": threads}
            mine = ours_under(python, {**spec, "repeats": 5, "precision": "fp32"})
            ratio = mine["words_per_s"] / theirs["words_per_s"]
            rows.append({"workload": workload, "torch": mine["torch"], "ours": mine, "peer": theirs, "ratio": ratio})
            print(
                f"{workload:>12} torch {mine['torch']:>14}: ours {mine['words_per_s']:8.1f} words/s, "
                f"AllenNLP {theirs['words_per_s']:8.1f} -> {ratio:.2f}x",
                flush=True,
            )
    return {"machine": machine(threads), "date": time.strftime("%Y-%m-%d"), "rows": rows}


def update_markdown(report: dict) -> None:
    lines = [
        f"### Against the peer on the lowest and the newest torch (fp32, uncapped, {report['date']})",
        "",
        f"Machine: {report['machine'].split(', torch')[0]}; ours under each row's torch. Full-size weights, "
        "exact fp32, the char-CNN cache off; AllenNLP `Elmo` "
        "in its own venv, measured once per workload in the same run. Command: "
        "`python bench/bench_peer_torch.py PEER_DIR PYTHON_WITH_TORCH_A PYTHON_WITH_TORCH_B`.",
        "",
        "| workload | our torch | ours (words/s) | AllenNLP (words/s) | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['workload']} | {r['torch']} | {r['ours']['words_per_s']:,.1f} | {r['peer']['words_per_s']:,.1f} | "
            f"{r['ratio']:.2f}x |"
        )
    write_section("bench_peer_torch:cpu", lines + [""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer", type=Path, help="the folder the peer's setup.sh built")
    parser.add_argument("pythons", nargs="+", help="Python interpreters, each in a venv with spacy-elmo and a torch")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    report = run(args.peer, args.pythons, args.threads)
    from spacy_elmo.files import atomic_write_json

    atomic_write_json(bench_peer.RESULTS / "peer-cpu-torch.json", report)
    update_markdown(report)


if __name__ == "__main__":
    main()
