"""bench/embed.py at a tiny size: the fixture's weights, 8 lines, the in-process way only (Ray's
ways cost seconds to start; no peer, no GPU)."""

import sys

from bench_runner import BENCH, smoke
from conftest import FIXTURE

EMBED = smoke(
    "embed",
    [("embed.py", "--ways", "process", "--weights", str(FIXTURE), "--lines", "8")],
    [("embed.py", "--render-only")],
)


def test_embed_in_this_process(bench_smokes):
    run = bench_smokes.outcome(EMBED)
    report = run.results("embed-cpu")
    assert "threads" in report["machine"] and report["lines"] == 8
    (row,) = report["rows"]
    assert row["way"] == "in this process" and row["tokens"] > 0
    assert row["words_per_s"] > 0 and row["words_per_s_in_blocks"] > 0 and row["peak_rss_mib_per_worker"] > 0
    sizes = report["bytes_per_token"]
    assert sizes["tokens"] == row["tokens"] and sizes["hdf5_blocks"] >= sizes["float32_bytes_per_token"]
    assert report["peer"] is None and report["ray_start_s"] is None

    text = run.measured("embed:embed-cpu")
    assert report["machine"] in text and "`python bench/embed.py --ways process --weights" in text
    assert "| in this process | 1 |" in text
    assert run.rendered("embed:embed-cpu") == text

    # scripts/gpu_session.sh compares the GPU's output with Ray's through this function
    sys.path.insert(0, str(BENCH))
    try:
        from embed import same_outputs
    finally:
        sys.path.remove(str(BENCH))
    folder = run.output / "out" / "embed-in-this-process"
    assert same_outputs([folder, folder])
