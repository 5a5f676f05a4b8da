"""Lesser CPUs simulated on this one, for tests and benchmarks: the caps that make oneDNN, ATen and
MKL run the kernels such a CPU would (each library reads its own variable). A cap chooses kernels;
it gives neither that CPU's speed nor another vendor's rounding, and it can only lower: a cap above
this CPU forces instructions it lacks (SIGILL)."""

from typing import Dict, Optional

# What makes a process run a lesser CPU's kernels: oneDNN's, ATen's and MKL's caps (each library
# reads its own variable). Used by the capped tests and ``bench/peer.py --cap`` and ``bench/kernels.py --cap``.
SIMULATED_CPUS: Dict[str, Dict[str, str]] = {
    "AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "AVX512_CORE": {
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
        "ATEN_CPU_CAPABILITY": "avx512",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
    },
}


def why_not_cap(cap: str) -> Optional[str]:
    """Why simulating the lesser CPU ``cap`` (a key of ``SIMULATED_CPUS``) is no simulation here, or
    None where it is one: a cap only ever lowers. A cap above this CPU would force instructions it
    lacks (an AMD EPYC Zen 3 capped at AVX512_CORE died of SIGILL); one at its level changes nothing."""
    from spacy_elmo.kernels import machine  # here: a benchmark's parent process need not import torch

    own = frozenset(name for name in machine.KERNEL_FEATURES if name in machine._cpu_flags())
    allowed = machine.ISA_CAPS[SIMULATED_CPUS[cap]["ONEDNN_MAX_CPU_ISA"]]
    missing = sorted(allowed - own)
    if missing:
        return f"this CPU lacks {', '.join(missing)}: a cap at {cap} would force instructions it does not have"
    if own <= allowed:
        return f"this CPU has nothing above {cap}: the cap would change nothing"
    return None
