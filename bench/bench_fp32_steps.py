"""The fp32 LSTM step's tiles on a CUDA GPU: which tile shapes give the same bits faster.

    python bench/bench_fp32_steps.py [--out FILE] [--lanes 1 32 256] [--candidates JSON]

The fp32 step kernels (``triton_kernels.step_pieces_kernel``) sum each piece of 128 products as a
chain of fused multiply-adds in order, so lanes, columns, unrolling, warps and stages per program
change the speed and never the arithmetic; the piece length would change it and stays 128. For each
candidate of the recurrent matmul's and the projection's tiles, one whole step
(``TritonOps.lstm_step``) is timed at 1, 32 and 256 lanes (triton's do_bench, median) at the
full-size model's shapes, and its outputs (h, c and the layer's rows) are compared bitwise with the
package's tiles on the same inputs. Prints a table; the fastest bit-equal candidate of each kernel
(geometric mean over the lane counts) is printed last, as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

P, H, LANES, STEP = 512, 4096, (1, 32, 256), 5
# (rows, cols, depth, warps, stages, piece): see triton_ops.Tiles; piece 128 throughout (the same sums)
CANDIDATES = [
    (16, 128, 4, 4, 1, 128),
    (32, 64, 4, 4, 1, 128),
    (32, 128, 4, 8, 1, 128),
    (16, 64, 8, 2, 1, 128),
    (8, 64, 4, 1, 1, 128),
    (16, 256, 4, 8, 1, 128),
    (64, 64, 4, 8, 1, 128),
    (16, 64, 4, 4, 2, 128),
    (32, 64, 8, 4, 1, 128),
    (8, 128, 8, 2, 1, 128),
]


def step_inputs(ops, lanes: int):
    """A layer's weights, a schedule of ``lanes`` sentences of 40 tokens, gate inputs and a random
    lane state, on the GPU."""
    import torch

    from spacy_elmo.network.config import BiLMConfig
    from spacy_elmo.network.gpu_stacks import Schedule
    from spacy_elmo.network.lstm_layer import LstmLayer

    torch.manual_seed(lanes)
    config = BiLMConfig.preset("original")
    pair = ops.layer_pair(LstmLayer(P, config).cuda(), LstmLayer(P, config).cuda())
    schedule = Schedule.build([40] * lanes)
    tables = schedule.tables(schedule.on(torch.device("cuda")))
    gate_inputs = torch.randn(2, 40 * lanes, 4 * H, device="cuda")
    state = ops.lane_state(lanes, H, P, gate_inputs)
    for buffer in state:
        buffer.normal_()
    return pair, tables, gate_inputs, state


def run_step(ops, inputs, state):
    """One step from ``state`` (copied): (h, c, out rows)."""
    import torch

    pair, tables, gate_inputs, _ = inputs
    state = type(state)(*(buffer.clone() for buffer in state))
    out = torch.zeros(2, gate_inputs.shape[1], P, device="cuda")
    ops.lstm_step(STEP, pair, gate_inputs, tables, state, out, (3.0, 3.0))
    torch.cuda.synchronize()
    return state.h, state.c, out


def parsed_candidates(text: str) -> list:
    """``--candidates``: a JSON list of [rows, cols, depth, warps, stages] (piece 128 added)."""
    options = json.loads(text)
    if not all(isinstance(o, list) and len(o) == 5 and all(isinstance(v, int) for v in o) for o in options):
        raise SystemExit(f"--candidates takes a JSON list of [rows, cols, depth, warps, stages], got {text!r}.")
    return [tuple(option) + (128,) for option in options]


def measure(ops, reference_ops, inputs_by_lanes) -> dict:
    import torch
    from triton.testing import do_bench

    row = {"ms": {}, "bitwise": True}
    for lanes, inputs in inputs_by_lanes.items():
        state = inputs[3]
        expected = run_step(reference_ops, inputs, state)
        got = run_step(ops, inputs, state)
        row["bitwise"] &= all(torch.equal(a, b) for a, b in zip(expected, got))
        pair, tables, gate_inputs, _ = inputs
        work = type(state)(*(buffer.clone() for buffer in state))
        out = torch.empty(2, gate_inputs.shape[1], P, device="cuda")
        arguments = (STEP, pair, gate_inputs, tables, work, out, (3.0, 3.0))
        row["ms"][lanes] = do_bench(lambda at=arguments: ops.lstm_step(*at), return_mode="median")
    row["mean_ms"] = math.exp(sum(math.log(ms) for ms in row["ms"].values()) / len(row["ms"]))
    return row


def main() -> None:
    import torch

    from spacy_elmo.kernels.triton_ops import TILES, Tiles, TritonOps

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="the report as JSON")
    parser.add_argument("--lanes", nargs="+", type=int, default=list(LANES), help="lane counts timed")
    parser.add_argument("--candidates", type=parsed_candidates, help="recurrent tiles to try, as JSON (see above)")
    parser.add_argument("--projection-candidates", type=parsed_candidates, help="projection tiles to try")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    package = TritonOps("fp32", TILES["fp32"])
    inputs_by_lanes = {lanes: step_inputs(package, lanes) for lanes in args.lanes}
    tried = {"recurrent": args.candidates or CANDIDATES, "projection": args.projection_candidates or CANDIDATES}
    rows = [{"kernel": "package", "tiles": None, **measure(package, package, inputs_by_lanes)}]
    for kernel in ("recurrent", "projection"):
        for option in tried[kernel]:
            tiles = dataclasses.replace(TILES["fp32"], **{kernel: Tiles(*option)})
            try:
                row = measure(TritonOps("fp32", tiles), package, inputs_by_lanes)
            except Exception as failure:  # a shape the compiler refuses: reported, the sweep goes on
                row = {"failed": str(failure)[-200:]}
            rows.append({"kernel": kernel, "tiles": option, **row})
    for row in rows:
        timings = " ".join(f"{lanes}:{ms:.4f}" for lanes, ms in row.get("ms", {}).items())
        print(f"{row['kernel']:>10} {row['tiles']} {timings} bitwise={row.get('bitwise')} {row.get('failed', '')}")
    best = {}
    for kernel in ("recurrent", "projection"):
        equal = [r for r in rows if r["kernel"] in (kernel, "package") and r.get("bitwise")]
        winner = min(equal, key=lambda r: r["mean_ms"])
        best[kernel] = winner["tiles"] or dataclasses.astuple(getattr(TILES["fp32"], kernel))
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "lanes": args.lanes}
    report.update(rows=rows, best=best)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({"best": best}))


if __name__ == "__main__":
    main()
