"""How far exact fp32 on a CUDA GPU lands from exact fp32 on this machine's CPU: the tolerance that
docs/determinism.md states between the two (bitwise equality holds within one device, not across).

    python bench/gpu_drift.py            # on a machine with a CUDA GPU; prints one JSON line per model

Models: the fixture's tiny real ELMo on its sentences (clipped: the step loop on both devices), and a
random unclipped `mini` biLM on 64 sentences of shared/data/corpus/valid.txt, through the step loop
and through the fused (cuDNN) path on the GPU. Per layer: max |GPU - CPU| and the largest |CPU| value.
"""

from __future__ import annotations

import json

import numpy as np
import torch
from bench_peer import FIXTURE, workload_sentences

from spacy_elmo import BiLM, BiLMConfig, embed_sentences, import_original


def drift(bilm: BiLM, sentences: list, path: str = "auto") -> list:
    """Per layer: max |cuda - cpu| over every token, and max |cpu|."""
    bilm = bilm.with_settings(lstm_path="step")
    on_cpu = np.concatenate(embed_sentences(bilm.cpu(), sentences), axis=1)
    bilm = bilm.with_settings(lstm_path=path)
    on_gpu = np.concatenate(embed_sentences(bilm.cuda(), sentences), axis=1)
    bilm.cpu()
    return [
        {"max_abs_diff": float(np.abs(on_gpu[j] - on_cpu[j]).max()), "max_abs": float(np.abs(on_cpu[j]).max())}
        for j in range(on_cpu.shape[0])
    ]


def main() -> None:
    fixture = import_original(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5")
    streams = json.loads((FIXTURE / "sentences.json").read_text())
    print(json.dumps({"model": "fixture (clipped)", "layers": drift(fixture, [s.split() for s in streams[0]])}))
    torch.manual_seed(0)
    mini = BiLM(BiLMConfig.preset("mini", cell_clip=None, proj_clip=None)).eval()
    sentences = workload_sentences("64 sentences")
    for path in ("step", "fused"):
        print(json.dumps({"model": f"random mini, unclipped, GPU {path}", "layers": drift(mini, sentences, path)}))


if __name__ == "__main__":
    main()
