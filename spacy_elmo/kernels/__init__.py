"""The backends: how a model computes on a device in a precision, each way one ``Backend`` class
(``backends``) chosen once by ``select`` from what the machine is (features, exactness probes,
torch's version; never a timing), with the arithmetic they run: fixed-shape (batch-invariant)
matmuls and elementwise functions, oneDNN's CPU paths, bf16 and int8, the LSTM step loop and
lanes, and the GPU's Triton kernels and CUDA graphs. The only room that asks about a device, a
precision or a route.

A new backend (a GPU, an instruction set, a precision), kernel or probe goes here.
"""
