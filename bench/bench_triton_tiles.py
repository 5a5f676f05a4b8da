"""The GPU kernels' tile shapes, timed at the full-size model's shapes (a CUDA GPU only).

    python bench/bench_triton_tiles.py [--precisions fp32 bf16]

For each kernel of ``spacy_elmo.kernels.triton_ops`` and precision, the tiles the package runs
(``TILES``, marked *) and a few others, timed with triton.testing.do_bench (median) on random data
at the original model's sizes (P 512, H 4096, 2,048 filters of widths 1-7 over 16-dim chars): the
LSTM step's kernels for 1, 32 and 256 lanes, both directions' input projection for 2,048
tokens, and the char CNN for 2,048 tokens of 20 characters. Also the device's two ceilings: a
device-to-device copy (bytes read and written) and a large matmul in IEEE fp32 (TF32 off) and in
bf16. The package's tiles are fixed by precision in code; this only informs that choice. Writes
bench/results/triton-tiles.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
P, H, E, FILTERS = 512, 4096, 16, ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))

# (rows, cols, depth, warps, stages[, piece]): see triton_ops.Tiles
CANDIDATES = {
    "fp32": {
        # the input projections: fp32's largest GPU time after the step kernels (BENCHMARKS.md's profile)
        "linear": [(128, 256, 16, 8, 2), (256, 128, 16, 8, 2), (128, 128, 32, 8, 2), (128, 128, 16, 8, 3)],
        "recurrent": [(16, 64, 8, 4, 1, 128), (16, 128, 4, 4, 1, 128), (16, 64, 4, 2, 1, 64), (8, 64, 4, 2, 1, 256)],
        "projection": [(16, 128, 4, 4, 1, 128), (16, 64, 8, 4, 1, 64), (16, 64, 4, 4, 1, 256), (8, 64, 4, 2, 1)],
        "cell": [(16, 128, 1, 4, 1), (32, 64, 1, 2, 1)],
    },
    "bf16": {
        "cell": [(32, 64, 64, 4, 3), (16, 64, 64, 4, 3)],
        "projection": [(16, 32, 128, 4, 3, 128), (16, 64, 64, 4, 3, 256), (16, 64, 64, 4, 3, 64)],
    },
}


def ceilings() -> dict:
    import torch
    from triton.testing import do_bench

    big = torch.empty(1 << 28, device="cuda")  # 1 GiB
    copy_ms = do_bench(lambda: big.clone(), return_mode="median")
    a = torch.randn(8192, 8192, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    fp32_ms = do_bench(lambda: a @ a, return_mode="median")
    half = a.bfloat16()
    bf16_ms = do_bench(lambda: half @ half, return_mode="median")
    flop = 2 * 8192**3
    return {
        "copy_tb_s": 2 * big.numel() * 4 / copy_ms / 1e9,
        "fp32_ieee_tflops": flop / fp32_ms / 1e9,
        "bf16_tflops": flop / bf16_ms / 1e9,
    }


def cases(ops) -> dict:
    """name -> a call that runs that kernel once with ``ops``'s tiles, on random data."""
    import torch

    from spacy_elmo.network.config import BiLMConfig
    from spacy_elmo.network.gpu_stacks import Schedule
    from spacy_elmo.network.lstm_layer import LstmLayer

    torch.manual_seed(0)
    cuda = dict(device="cuda")
    config = BiLMConfig.preset("original")
    pair = ops.layer_pair(LstmLayer(P, config).to(**cuda), LstmLayer(P, config).to(**cuda))
    x = torch.randn(2048, P, **cuda).unsqueeze(0).expand(2, -1, -1)
    convs = [torch.randn(count, E, width, **cuda) * 0.1 for width, count in FILTERS]
    weights, widths = ops.conv_weights(convs)
    chars = torch.randn(2048, 20, E, **cuda)
    calls = {
        "linear (input projection, 2,048 tokens)": lambda: ops.linear_pair(x, pair.w_ih, pair.bias),
        "conv (2,048 tokens of 20 chars)": lambda: ops.conv_max(chars, weights, widths),
    }
    for lanes in (1, 32, 256):
        schedule = Schedule.build([40] * lanes)
        tables = schedule.tables(schedule.on(torch.device("cuda")))
        gate_inputs = torch.randn(2, 40 * lanes, 4 * H, **cuda)
        state = ops.lane_state(lanes, H, P, gate_inputs)
        for buffer in state:
            buffer.normal_()
        out = torch.empty(2, 40 * lanes, P, **cuda)
        calls[f"lstm step ({lanes} lanes)"] = lambda t=tables, g=gate_inputs, s=state, o=out: ops.lstm_step(
            5, pair, g, t, s, o, (3.0, 3.0)
        )
    return calls


def main() -> None:
    import torch
    from triton.testing import do_bench

    from spacy_elmo.kernels.triton_ops import TILES, Tiles, TritonOps

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    args = parser.parse_args()
    report = {"device": torch.cuda.get_device_name(0), "ceilings": ceilings(), "rows": []}
    print(report["ceilings"], flush=True)
    for precision in args.precisions:
        chosen = TILES[precision]
        variants = [("*", chosen)]
        for kernel, options in CANDIDATES[precision].items():
            for option in options:
                variants.append((f"{kernel}={option}", dataclasses.replace(chosen, **{kernel: Tiles(*option)})))
        for label, tiles in variants:
            try:
                ms = {
                    name: do_bench(call, return_mode="median")
                    for name, call in cases(TritonOps(precision, tiles)).items()
                }
            except Exception as failure:  # a tile shape the compiler refuses: reported, the sweep goes on
                ms = {"failed": str(failure)[-300:]}
            report["rows"].append({"precision": precision, "variant": label, "ms": ms})
            print(precision, label, {k: round(v, 4) if isinstance(v, float) else v for k, v in ms.items()}, flush=True)
    out = ROOT / "bench" / "results" / "triton-tiles.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
