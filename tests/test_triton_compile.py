"""Every Triton kernel compiles for a Hopper GPU (sm_90) with the tiles the package runs, checked
without a GPU (Triton's ptxas): scripts/compile_gpu_kernels.py in a process of its own (this suite's
other Triton tests run its interpreter, which replaces the kernels by interpreted ones)."""

import importlib.util
import subprocess
import sys

import pytest
from conftest import ROOT, with_this_checkout

# Not imported here: tests/test_triton_kernels.py needs Triton imported first with its interpreter on.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="the GPU kernels are written in Triton (pip install triton)"
)


@pytest.mark.matrix
def test_every_kernel_compiles_for_an_h100():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compile_gpu_kernels.py")],
        capture_output=True,
        text=True,
        env={key: value for key, value in with_this_checkout().items() if key != "TRITON_INTERPRET"},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    compiled = [line for line in done.stdout.splitlines() if "registers" in line]
    assert len(compiled) >= 20, done.stdout
