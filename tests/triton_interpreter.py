"""Run the Triton kernels on a CPU: Triton's interpreter (``TRITON_INTERPRET=1``), its ``tl.dot``
made to sum as a GPU's does and two bfloat16 gaps filled.

- ``tl.dot``: the interpreter calls numpy's matmul, whose BLAS may sum a row in another order
  depending on the rows beside it; here each element is summed over K in order, one rounding to
  float32 a term (as the GPU's fused multiply-adds, up to double rounding), so a row's bits depend
  on its own inputs alone, as on the GPU.
- Triton 3.6's interpreter multiplies bfloat16 dot operands as their raw 16-bit patterns (it
  widens only fp8), and rounds float32 to bfloat16 otherwise than to the nearest (torch and GPUs
  round to the nearest, ties to even).

Importing this module before ``spacy_elmo.kernels.triton_kernels`` sets the interpreter on and
patches all three.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

if not isinstance(tl.zeros, interpreter.InterpretedFunction):
    raise RuntimeError(
        "Triton was imported before TRITON_INTERPRET=1 was set, so its own functions (tl.zeros) are compiled "
        "ones: import this module, or set TRITON_INTERPRET=1, before anything imports triton."
    )

_create_dot = interpreter.InterpreterBuilder.create_dot
_cast = interpreter.InterpreterBuilder.cast_impl
_fp_to_fp = interpreter.InterpreterBuilder.create_fp_to_fp


def _as_float32(handle):
    if handle.dtype.scalar != tl.bfloat16:
        return handle
    bits = torch.from_numpy(handle.data.astype(np.uint16).view(np.int16).copy()).view(torch.bfloat16)
    return interpreter.TensorHandle(bits.float().numpy(), tl.float32)


def _to_bfloat16(handle):
    values = torch.from_numpy(np.ascontiguousarray(handle.data, dtype=np.float32))
    bits = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return interpreter.TensorHandle(bits, tl.bfloat16)


def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    left, right = _as_float32(a).data.astype(np.float64), _as_float32(b).data.astype(np.float64)
    if left.ndim != 2 or d.data.dtype != np.float32:
        return _create_dot(self, _as_float32(a), _as_float32(b), d, input_precision, max_num_imprecise_acc)
    acc = d.data.copy()
    for k in range(left.shape[1]):
        acc = (acc + left[:, k : k + 1] * right[k : k + 1, :]).astype(np.float32)
    return interpreter.TensorHandle(acc, d.dtype.scalar)


def cast_impl(self, src, dst_type):
    if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
        return _to_bfloat16(src)
    return _cast(self, src, dst_type)


def create_fp_to_fp(self, src, dst_type, rounding_mode):
    if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
        return _to_bfloat16(src)
    return _fp_to_fp(self, src, dst_type, rounding_mode)


interpreter.InterpreterBuilder.create_dot = create_dot
interpreter.InterpreterBuilder.cast_impl = cast_impl
interpreter.InterpreterBuilder.create_fp_to_fp = create_fp_to_fp
