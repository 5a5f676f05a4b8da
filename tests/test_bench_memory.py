"""bench/memory.py at a tiny size: `long-run` over 40 docs each way (a sample every 20), `storage`
with one configuration over 5 lines; then each section again from its results alone."""

from bench_runner import smoke

LONG_RUN = smoke(
    "memory-long-run",
    [("memory.py", "long-run", "--docs", "40", "--every", "20", "--threads", "1")],
    [("memory.py", "long-run", "--render-only")],
)
STORAGE = smoke(
    "memory-storage",
    [("memory.py", "storage", "--lines", "5", "--stores", "mix", "--dtypes", "float16")],
    [("memory.py", "storage", "--render-only")],
)


def test_long_run_samples_rss_with_and_without_elmo(bench_smokes):
    run = bench_smokes.outcome(LONG_RUN)
    memory = run.results("memory-cpu")
    assert "1 threads" in memory["machine"] and memory["docs"] == 40
    assert [run_["with_elmo"] for run_ in memory["runs"]] == [False, True]
    for run_ in memory["runs"]:
        phases = [point["phase"] for point in run_["curve"]]
        assert phases == ["start", "nlp(text)", "nlp(text)", "nlp.pipe", "nlp.pipe"]
        assert all(point["rss_mb"] > 0 and point["strings"] > 0 for point in run_["curve"])
    assert memory["runs"][1]["curve"][-1]["token_cache_rows"] > 0
    assert memory["runs"][1]["curve"][-1]["rss_mb"] > memory["runs"][0]["curve"][-1]["rss_mb"]
    long_run = run.measured("memory:memory-cpu")
    assert memory["machine"] in long_run and "`python bench/memory.py long-run --docs 40 --every 20" in long_run
    assert "| spaCy + elmo | nlp.pipe |" in long_run
    assert run.is_png("memory-cpu")
    assert run.rendered("memory:memory-cpu") == long_run


def test_storage_measures_what_a_doc_keeps(bench_smokes):
    run = bench_smokes.outcome(STORAGE)
    kept = run.results("storage-cpu")
    assert "threads" in kept["machine"] and kept["tokens"] > 0
    (row,) = kept["rows"]
    assert (row["store"], row["dtype"]) == ("mix", "float16")
    assert row["seconds"] > 0 and row["peak_rss_mb"] > 0 and row["kept_mb"] > 0
    assert row["elmo_bytes_per_token"] >= 2 * 256  # float16 mixed vectors: 2 bytes of each of 2P = 256 numbers
    storage = run.measured("memory:storage-cpu")
    assert kept["machine"] in storage and "`python bench/memory.py storage --lines 5" in storage
    assert "| `mix` | float16 |" in storage
    assert run.rendered("memory:storage-cpu") == storage
