"""How far the opt-in precisions are from exact fp32 on the full-size model: per layer, the largest
absolute difference of any vector element and the lowest and mean cosine of a token's vectors.

    python bench/precision_error.py                          # bench/out/peer-full-bilm (bench_peer.py)
    python bench/precision_error.py --weights BILM_DIR --workloads "64 sentences"

Sentences: the peer benchmark's workloads (bench_peer.py: the fixture's 64 sentences, 1,000
sentences of real text). Runs the biLM directly (``embed_sentences``, token cache off); fp32 once
per workload, then each precision. Writes bench/results/precision-error.json. Speed is not
measured here (bench_peer.py does, on a quiet machine).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench_peer import OUT, RESULTS, layer_errors, machine, workload_sentences

PRECISIONS = ["bf16", "int8"]
DEFAULT_WORKLOADS = ["64 sentences", "1,000 sentences"]


def measure(weights: Path, workloads: list, threads: int) -> dict:
    """{workload: {"words": n, precision: [per layer: max_abs, max_abs_fp32, min_cosine, mean_cosine]}}."""
    import torch

    from spacy_elmo import embed_sentences, load_bilm

    torch.set_num_threads(threads)
    bilm = load_bilm(weights).eval()
    bilm.token_cache.capacity = 0
    report = {}
    for workload in workloads:
        sentences = workload_sentences(workload)
        bilm.precision = "fp32"
        exact = embed_sentences(bilm, sentences)
        report[workload] = {"words": sum(len(sentence) for sentence in sentences)}
        for precision in PRECISIONS:
            bilm.precision = precision
            report[workload][precision] = layer_errors(exact, embed_sentences(bilm, sentences))
    return report


def print_report(report: dict) -> None:
    for workload, rows in report.items():
        print(f"{workload} ({rows['words']} words)")
        for precision in PRECISIONS:
            for layer, error in enumerate(rows[precision]):
                print(
                    f"  {precision} layer {layer}: max abs {error['max_abs']:.2e} (largest fp32 "
                    f"{error['max_abs_fp32']:.3f}), cosine min {error['min_cosine']:.6f} "
                    f"mean {error['mean_cosine']:.6f}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", type=Path, default=OUT / "peer-full-bilm", help="a native biLM directory")
    parser.add_argument("--workloads", nargs="+", default=DEFAULT_WORKLOADS, help="bench_peer.py's workload names")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not (args.weights / "model.safetensors").is_file():
        raise SystemExit(
            f"No biLM at {args.weights}: run bench/bench_peer.py once (it converts the full-size weights there), "
            "or give --weights BILM_DIR."
        )
    report = measure(args.weights, args.workloads, args.threads)
    print_report(report)
    from spacy_elmo.io import atomic_write_json

    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        RESULTS / "precision-error.json",
        {"weights": str(args.weights), "machine": machine(args.threads), "date": time.strftime("%Y-%m-%d"), **report},
    )
    print(f"Wrote {RESULTS / 'precision-error.json'}")


if __name__ == "__main__":
    main()
