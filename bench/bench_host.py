"""The host's work in one call of the elmo component, apart from the biLM's arithmetic: what a GPU
waits for when the host is slower than its kernels (bf16 on an H100, BENCHMARKS.md).

    python bench/bench_host.py                  # the 1,000-sentence workload of bench_gpu.py
    python bench/bench_host.py --sentences 64

Each step on the workload's docs (``Doc(words=...)``, as bench_gpu.py makes them), the fastest and
the median of ``--rounds`` runs, in ms:
- cutting docs into sentences;
- the token strings the biLM reads (as the package reads them, each doc's once, and through the doc
  one token at a time, the way the package avoids);
- the char ids of the distinct tokens, and cutting their character axis after the longest token (in
  NumPy as the component does, and the same in torch on the CPU, as ``CharEncoder.trim`` does for
  callers that pass whole char ids);
- the GPU's lane schedule (host tables, built on any machine);
- placing the layers into a fresh array per doc (each round's arrays kept until the next, as docs
  kept by a caller) against one copy of the same bytes into memory already touched, writing once to
  each page of fresh arrays (what the host could do while it waits for a GPU) and that followed by
  the placement;
- placing them into one buffer for all the docs of the call (a view each), the way tried and not
  kept (BENCHMARKS.md, "The output path on a GPU");
- with ``store_dtype = "float16"``: placing float32 layers and rounding each doc's array (before),
  against placing layers that arrive in float16 (rounded on the GPU, as now);
- keeping each doc's layers (``set_annotations``, the "layers" store).

The layers are random float32 of the original model's width (L+1 = 3, 2P =
1,024). A placement's cost depends on what the process allocated and freed before (whether the
allocator hands back pages already touched or maps fresh ones): the steps run in turn, a round at
a time, so the placements see a heap in use, as in a process that has embedded for a while.
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
PAGE_BYTES = 4096


def timed_ms(steps: Dict[str, Callable[[], object]], rounds: int) -> Dict[str, Dict[str, float]]:
    """The fastest and the median of ``rounds`` runs of each step, in ms; each round runs every
    step once, in turn, so that each sees the heap as the others leave it."""
    times: Dict[str, list] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: {"fastest": min(runs), "median": statistics.median(runs)} for name, runs in times.items()}


def steps(sentences: list) -> Dict[str, Callable[[], object]]:
    """Each measured step as a function of nothing, over docs of ``sentences``."""
    import spacy
    import torch
    from spacy.tokens import Doc

    from spacy_elmo.network.char_encoder import CharEncoder
    from spacy_elmo.network.chars import TokenIndexer
    from spacy_elmo.network.config import BiLMConfig
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
    chars = indexer.encode(distinct)[0]
    encoder = CharEncoder(BiLMConfig.preset("small"))  # the original model's filters, widest 7
    rng = np.random.default_rng(0)
    layers = [rng.standard_normal((SHAPE[0], len(sentence), SHAPE[1]), dtype=np.float32) for sentence in words]
    storage, mix = Storage(), MixSettings.average(SHAPE[0])
    return {
        **placements(docs, segments, layers),
        "cut docs into sentences": lambda: [cut(position, doc, 4096) for position, doc in enumerate(docs)],
        "token strings (each doc's once)": lambda: sentence_runs.segment_words(docs, segments, text),
        "token strings (per token through the doc, before)": lambda: [
            tuple(text(docs[position][int(i)]) for i in indices) for position, indices in segments
        ],
        "char ids of the distinct tokens": lambda: indexer.encode(distinct),
        "cut their characters (NumPy, as the component does)": lambda: encoder.cut_characters(chars),
        "cut their characters (the same in torch, on the CPU)": lambda: encoder.trim(torch.from_numpy(chars)),
        "lane schedule (GPU, host tables)": lambda: Schedule.build([len(s) + 2 for s in words]),
        "keep each doc's layers (set_annotations)": lambda: [
            storage.keep(doc, layers[i], mix, with_tensor=False) for i, doc in enumerate(docs)
        ],
    }


def placements(docs: list, segments: list, layers: list) -> Dict[str, Callable[[], object]]:
    """The placement steps: the layers (one array per segment) into fresh per-doc arrays, with and
    without first writing once to each of their pages, against one copy of the same bytes."""
    from spacy_elmo.pipeline import sentence_runs

    packed = np.concatenate(layers, axis=1)
    touched = np.empty_like(packed)
    halves = [sentence_layers.astype(np.float16) for sentence_layers in layers]
    kept: list = []

    def fresh_outputs(dtype: type = np.float32) -> list:
        kept[:] = []  # the last round's arrays go as the new ones come, as docs a caller let go
        kept.append(sentence_runs.empty_outputs(docs, segments, SHAPE, dtype))
        return kept[-1]

    def one_buffer() -> list:  # tried 2026-11-28: one allocation for all the docs, a view each
        kept[:] = []
        sizes = [SHAPE[0] * len(doc) * SHAPE[1] for doc in docs]
        buffer = np.empty(sum(sizes), dtype=np.float32)
        ends = np.cumsum(sizes)
        kept.append([buffer[end - size : end].reshape(SHAPE[0], -1, SHAPE[1]) for end, size in zip(ends, sizes)])
        return kept[-1]

    def place(outputs: list, source: list = layers) -> list:
        for segment, sentence_layers in zip(segments, source):
            sentence_runs._place(outputs, segment, sentence_layers)
        return outputs

    def touch(outputs: list) -> list:  # one write a page, keeping its value
        for array in outputs:
            array.reshape(-1).view(np.uint32)[:: PAGE_BYTES // 4] |= 0
        return outputs

    return {
        "place layers into fresh arrays per doc": lambda: place(fresh_outputs()),
        "one copy of the same bytes into touched memory": lambda: np.copyto(touched, packed),
        "touch each page of fresh arrays per doc": lambda: touch(fresh_outputs()),
        "touch each page of fresh arrays, then place": lambda: place(touch(fresh_outputs())),
        "place into one buffer for all the docs (tried, not kept)": lambda: place(one_buffer()),
        "float16 kept: placed as float32, each doc's array rounded": lambda: [
            array.astype(np.float16) for array in place(fresh_outputs())
        ],
        "float16 kept: float16 layers placed (as from a GPU)": lambda: place(fresh_outputs(np.float16), halves),
    }


def run(count: int, rounds: int) -> dict:
    from bench_bilm import load_sentences

    from spacy_elmo.kernels.machine import cpu_description

    sentences = load_sentences(count)[0]
    timings = timed_ms(steps(sentences), rounds)
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
