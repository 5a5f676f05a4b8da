"""Compile every Triton kernel of spacy_elmo for a Hopper GPU (sm_90) here, without a GPU, and
print each variant's registers and spills (ptxas): a kernel the compiler refuses fails here, not in
a lent GPU's minutes.

    .venv/bin/python scripts/compile_gpu_kernels.py      # exit 1 if a kernel fails to compile
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
import triton.backends.nvidia  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from spacy_elmo.kernels import triton_kernels as kernels  # noqa: E402
from spacy_elmo.kernels.triton_ops import TILES, Tiles, TritonOps, lanes_per_program  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
PTXAS = Path(triton.backends.nvidia.__file__).parent / "bin" / "ptxas"
H, P, E, FILTERS = 4096, 512, 16, 2048  # the original model's sizes


def compile_variant(fn, pointers: dict, constants: dict, tiles: Tiles) -> str:
    """``fn`` compiled for sm_90 with these pointer types and compile-time constants (other
    arguments int32); ptxas's line on registers and spills."""
    signature = {name: "constexpr" if name in constants else pointers.get(name, "i32") for name in fn.arg_names}
    options = {"num_warps": tiles.warps, "num_stages": tiles.stages}
    compiled = triton.compile(ASTSource(fn, signature, constexprs=constants), target=TARGET, options=options)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as handle:
        handle.write(compiled.asm["ptx"])
    report = subprocess.run(
        [PTXAS, "-v", "--gpu-name", "sm_90a", handle.name, "-o", os.devnull], capture_output=True, text=True
    )
    os.unlink(handle.name)
    return " | ".join(
        line.split("info    :")[-1].strip()
        for line in report.stderr.splitlines()
        if "registers" in line or "spill" in line
    )


def f32(*names: str) -> dict:
    return dict.fromkeys(names, "*fp32")


def i32(*names: str) -> dict:
    return dict.fromkeys(names, "*i32")


def variants():
    """(precision, kernel, pointer types, constants, tiles) of every kernel as a model of the
    original sizes runs it, in each precision; the fp32 step kernels at 1, 4 and 16 lanes a program."""
    for precision, tiles in TILES.items():
        bf16, weight = precision == "bf16", "*bf16" if precision == "bf16" else "*fp32"
        t = tiles.linear
        pointers = {**f32("x_ptr", "bias_ptr", "out_ptr"), "w_ptr": weight}
        constants = dict(N=4 * H, K=P, HAS_BIAS=True, BF16=bf16, BM=t.rows, BN=t.cols, BK=t.depth, GROUP_M=8)
        yield precision, kernels.linear_kernel, pointers, constants, t
        t = tiles.conv
        pointers = {**f32("chars_ptr", "out_ptr"), "w_ptr": weight, "widths_ptr": "*i32"}
        constants = dict(F=FILTERS, E=E, WIDEST=7, BF16=bf16, BM=t.rows, BN=t.cols, BK=t.depth)
        yield precision, kernels.conv_max_kernel, pointers, constants, t
        for rows in (1, 4, 16) if not bf16 else (1,):
            yield from cell_variants(precision, tiles, rows, weight)
            yield from pieces_variants(precision, tiles, rows, weight)


def shape(precision: str, t: Tiles, rows: int) -> dict:
    """BM and BK as ``TritonOps.program_shape`` picks them for ``rows`` lanes."""
    program_rows, depth = TritonOps.of(precision).program_shape(t, rows)
    return dict(BM=program_rows, BK=depth)


def cell_variants(precision: str, tiles, rows: int, weight: str):
    names = ("h_ptr", "c_ptr", "hidden_ptr", "gate_inputs_ptr", "start_h_ptr", "start_c_ptr", "final_c_ptr")
    pointers = {
        **f32(*names, "pieces_ptr"),
        **i32("token_ptr", "start_ptr", "active_ptr", "end_ptr"),
        "w_hh_ptr": weight,
    }
    pieces = 0 if tiles.recurrent is None else -(-P // tiles.recurrent.piece)
    for stateful in (False, True):
        constants = dict(PIECES=pieces, H=H, P=P, CELL_CLIP=3.0, STATEFUL=stateful, BF16=precision == "bf16")
        constants.update(BH=tiles.cell.cols, **shape(precision, tiles.cell, rows))
        yield precision, kernels.lstm_cell_kernel, pointers, constants, tiles.cell


def pieces_variants(precision: str, tiles, rows: int, weight: str):
    for t, k, n, restarts in ((tiles.projection, H, P, False), (tiles.recurrent, P, 4 * H, True)):
        if t is None:
            continue
        pointers = {**f32("x_ptr", "pieces_ptr", "start_x_ptr"), **i32("active_ptr", "start_ptr"), "w_ptr": weight}
        for stateful in (False, True) if restarts else (False,):
            constants = dict(K=k, N=n, CHUNK=t.piece, RESTARTS=restarts, STATEFUL=stateful, BF16=precision == "bf16")
            constants.update(BN=t.cols, **shape(precision, t, rows))
            yield precision, kernels.step_pieces_kernel, pointers, constants, t
    pointers = {**f32("partial_ptr", "h_ptr", "out_ptr", "final_h_ptr"), **i32("token_ptr", "active_ptr", "end_ptr")}
    sums = tiles.sums
    for stateful in (False, True):
        pieces = -(-H // tiles.projection.piece)
        rows_there = lanes_per_program(sums.rows, rows)
        constants = dict(P=P, PIECES=pieces, PROJ_CLIP=3.0, STATEFUL=stateful, BM=rows_there, BN=sums.cols)
        yield precision, kernels.lstm_projection_sum_kernel, pointers, constants, sums


def main() -> int:
    failed = 0
    for precision, fn, pointers, constants, tiles in variants():
        label = f"{precision} {fn.__name__} {constants.get('BM', '')}x{constants.get('BN', constants.get('BH', ''))}"
        try:
            print(f"{label:48} {compile_variant(fn, pointers, constants, tiles)}", flush=True)
        except Exception as failure:  # every variant is tried; each failure is named
            failed += 1
            print(f"{label:48} FAILED: {str(failure)[-600:]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
