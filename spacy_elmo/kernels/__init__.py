"""The kernels that make inference exact and fast: fixed-shape (batch-invariant) matmuls and
elementwise functions, oneDNN's CPU paths, reduced precision (bf16, int8), and the probes that
decide once per machine which of them runs.

A new kernel (a GPU one, a new instruction set), or a new probe, goes here.
"""
