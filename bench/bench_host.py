"""The host's work in one call of the elmo component, apart from the biLM's arithmetic: what a GPU
waits for when the host is slower than its kernels (bf16 on an H100, BENCHMARKS.md).

    python bench/bench_host.py                  # the 1,000-sentence workload of bench_gpu.py
    python bench/bench_host.py --sentences 64

Each step on the workload's docs (``Doc(words=...)``, as bench_gpu.py makes them), the fastest and
the median of ``--rounds`` runs, in ms: cutting docs into sentences, the token strings the biLM reads (as the
package reads them, and through the doc one token at a time as it read them before 2026-11-27), the
char ids of the distinct tokens, the GPU's lane schedule (host tables, built on any machine),
placing the layers into a fresh array per doc (each round's arrays kept until the next, as docs
kept by a caller) against one copy of the same bytes into memory already touched (what the
placement costs without first touching new pages), and keeping each doc's layers (``set_annotations``,
the "layers" store). The layers are random float32 of the original model's width (L+1 = 3, 2P =
1,024). Placement runs first: its cost depends on what the process allocated and freed before
(whether the allocator hands back pages already touched or maps fresh ones), so its figure is the
cost in a process that has just loaded, not a constant.
Writes bench/results/host-cpu.json and its section of BENCHMARKS.md, naming the CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable, Dict

import numpy as np
from report import write_section

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHAPE = (3, 1024)  # the original model's L+1 layers of 2P


def timed_ms(step: Callable[[], object], rounds: int) -> Dict[str, float]:
    """The fastest and the median of ``rounds`` runs of ``step``, in ms."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return {"fastest": min(times), "median": statistics.median(times)}


def steps(sentences: list) -> Dict[str, Callable[[], object]]:
    """Each measured step as a function of nothing, over docs of ``sentences``."""
    import spacy
    from spacy.tokens import Doc

    from spacy_elmo.network.chars import TokenIndexer
    from spacy_elmo.network.gpu_stacks import Schedule
    from spacy_elmo.pipeline import sentence_runs
    from spacy_elmo.pipeline.mix_settings import MixSettings
    from spacy_elmo.pipeline.storage import Storage

    nlp = spacy.blank("en")
    docs = [Doc(nlp.vocab, words=sentence) for sentence in sentences]
    cut = sentence_runs.doc_segments
    segments = [segment for position, doc in enumerate(docs) for segment in cut(position, doc, 4096)]
    text = lambda token: token.text  # noqa: E731 (the component's ORTH reader)
    words = sentence_runs.segment_words(docs, segments, text)
    distinct = list(dict.fromkeys(token for sentence in words for token in ("<S>", *sentence, "</S>")))
    indexer = TokenIndexer()
    rng = np.random.default_rng(0)
    layers = [rng.standard_normal((SHAPE[0], len(sentence), SHAPE[1]), dtype=np.float32) for sentence in words]
    packed = np.concatenate(layers, axis=1)
    touched = np.empty_like(packed)
    kept: list = []

    def place() -> None:
        kept[:] = []  # the last round's arrays go as the new ones come, as docs a caller let go
        outputs = sentence_runs.empty_outputs(docs, segments, SHAPE)
        for segment, sentence_layers in zip(segments, layers):
            sentence_runs._place(outputs, segment, sentence_layers)
        kept.append(outputs)

    storage, mix = Storage(), MixSettings.average(SHAPE[0])
    return {  # placement first: what it costs depends on the heap's history (see the docstring)
        "place layers into fresh arrays per doc": place,
        "one copy of the same bytes into touched memory": lambda: np.copyto(touched, packed),
        "cut docs into sentences": lambda: [cut(position, doc, 4096) for position, doc in enumerate(docs)],
        "token strings (each doc's once)": lambda: sentence_runs.segment_words(docs, segments, text),
        "token strings (per token through the doc, before)": lambda: [
            tuple(text(docs[position][int(i)]) for i in indices) for position, indices in segments
        ],
        "char ids of the distinct tokens": lambda: indexer.encode(distinct),
        "lane schedule (GPU, host tables)": lambda: Schedule.build([len(s) + 2 for s in words]),
        "keep each doc's layers (set_annotations)": lambda: [
            storage.keep(doc, layers[i], mix, with_tensor=False) for i, doc in enumerate(docs)
        ],
    }


def run(count: int, rounds: int) -> dict:
    from bench_bilm import load_sentences

    from spacy_elmo.kernels.machine import cpu_description

    sentences = load_sentences(count)[0]
    timings = {name: timed_ms(step, rounds) for name, step in steps(sentences).items()}
    words = sum(len(sentence) for sentence in sentences)
    return {"cpu": cpu_description(), "sentences": len(sentences), "words": words, "rounds": rounds, "ms": timings}


def write_outputs(report: dict) -> None:
    from spacy_elmo.files import atomic_write_json

    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS / "host-cpu.json", report)
    lines = [
        f"### The host's work in one call ({time.strftime('%Y-%m-%d')})",
        "",
        f"Machine: {report['cpu']}. {report['sentences']:,} sentences ({report['words']:,} words) of held-out text as "
        f"docs; each step run {report['rounds']} times, layers of the original model's width. "
        "Command: `python bench/bench_host.py`.",
        "",
        "| step | fastest (ms) | median (ms) |",
        "|---|---:|---:|",
        *(f"| {name} | {ms['fastest']:.1f} | {ms['median']:.1f} |" for name, ms in report["ms"].items()),
        "",
    ]
    write_section("bench_host:cpu", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=1000, help="sentences of held-out text")
    parser.add_argument("--rounds", type=int, default=15, help="runs of each step")
    args = parser.parse_args()
    report = run(args.sentences, args.rounds)
    for name, ms in report["ms"].items():
        print(f"{name:>52}: fastest {ms['fastest']:8.1f} ms, median {ms['median']:8.1f} ms")
    write_outputs(report)
    print(json.dumps({"wrote": "bench/results/host-cpu.json and BENCHMARKS.md"}))


if __name__ == "__main__":
    main()
