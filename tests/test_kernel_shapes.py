"""A long run meets a bounded number of matmul shapes: oneDNN compiles and keeps a kernel per shape,
so every row count it is given must be one of ``onednn.bucket_rows``' sizes."""

import re
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import with_this_checkout
from cpu_features import int8_kernel_should_be_exact, onednn_rows_should_hold, skip_where_onednn_rows_vary
from promises import promised

from spacy_elmo.kernels import onednn, quantized
from spacy_elmo.kernels.onednn import bucket_rows, padded_to_bucket


def test_bucket_sizes_cover_every_count_with_at_most_a_quarter_more_rows():
    sizes = [bucket_rows(rows) for rows in range(1, 4097)]
    assert sizes[:8] == list(range(1, 9))  # small counts run as they are
    assert all(size >= rows for rows, size in enumerate(sizes, 1))
    assert all(size <= (1 + promised("row-padding")) * rows for rows, size in enumerate(sizes, 1) if rows > 8)
    assert sizes == sorted(sizes) and all(bucket_rows(size) == size for size in sizes)
    assert len(set(sizes[:256])) == 28 and len(set(sizes)) == 8 + 4 * 9
    assert [bucket_rows(rows) for rows in (9, 17, 33, 129, 257)] == [10, 20, 40, 160, 320]


def test_padding_appends_zero_rows_and_keeps_the_real_ones():
    x = torch.arange(27.0).reshape(9, 3)
    padded = padded_to_bucket(x)
    assert padded.shape == (10, 3) and torch.equal(padded[:9], x) and not padded[9:].any()
    assert padded_to_bucket(x[:1], least=2).shape == (2, 3)
    assert padded_to_bucket(x[:8]).shape == (8, 3)


@pytest.mark.skipif(not hasattr(torch, "_int_mm"), reason="this torch has no torch._int_mm")
def test_int8_sums_run_at_bucket_sizes_and_return_the_rows_asked_for(monkeypatch):
    generator = torch.Generator().manual_seed(3)
    a = torch.randint(-127, 128, (9, 64), dtype=torch.int8, generator=generator)
    b = torch.randint(-127, 128, (64, 32), dtype=torch.int8, generator=generator)
    seen = []
    real_int_mm = torch._int_mm
    monkeypatch.setattr(torch, "_int_mm", lambda x, y: seen.append(x.shape[0]) or real_int_mm(x, y))
    sums = quantized.int_mm(a, b)
    assert seen == [10]
    assert torch.equal(sums, (a.long() @ b.long()).int())


PRECISIONS = ["fp32", "int8"]
_RUN_DOCS = """
import spacy

# a sentence ends every 6 words: a doc of n words is ceil(n / 6) sentences, side by side in the
# step loop (1 to 15 of them), its tokens all in one call of the position-wise matmuls
words = [f"w{{i % 37}}x{{'y' * (i % 5)}}" + ("." if i % 6 == 5 else "") for i in range(200)]
texts = [" ".join(words[start : start + length]) for start, length in enumerate(range(1, 91))]
for precision in {precisions!r}:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={{"weights": {weights!r}, "precision": precision}})
    nlp.initialize()
    nlp(texts[0])
    print(f"LOADED {{precision}}", flush=True)
    for text in texts:
        nlp(text)
    list(nlp.pipe(texts, batch_size=7))
    print(f"RAN {{precision}}", flush=True)
"""


@pytest.fixture(scope="module")
def onednn_logs(tiny_weights, tmp_path_factory) -> dict:
    """oneDNN's own log (ONEDNN_VERBOSE) of each precision's matmuls after loading, by precision: one
    process runs them in turn (the variable is read when oneDNN starts), as two processes would."""
    script = tmp_path_factory.mktemp("onednn-log") / "run_docs.py"
    script.write_text(textwrap.dedent(_RUN_DOCS.format(weights=str(tiny_weights), precisions=PRECISIONS)))
    environment = {**with_this_checkout(), "ONEDNN_VERBOSE": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {p: done.stdout.split(f"LOADED {p}\n", 1)[1].split(f"RAN {p}\n", 1)[0] for p in PRECISIONS}


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")
@pytest.mark.parametrize("precision", PRECISIONS)
def test_docs_of_every_length_reach_onednn_at_bucket_sizes_only(onednn_logs, precision):
    """Docs of 1 to 90 words in sentences of up to 6, one at a time and in batches of 7 (a call's
    tokens, and its sentences side by side in the step loop, bring many row counts): oneDNN's own
    log (ONEDNN_VERBOSE) of every matmul run after loading names only row counts that are bucket
    sizes. Without buckets it names every count the docs bring (a kernel compiled and kept for each)."""
    if precision == "fp32":
        skip_where_onednn_rows_vary(onednn.available(torch.device("cpu")))
    rows_by_weight = _rows_by_weight(onednn_logs[precision])
    if not rows_by_weight:
        # oneDNN runs fp32 where its rows hold and int8 where the CPU has AMX tiles: there, none is a regression
        expected = onednn_rows_should_hold() if precision == "fp32" else int8_kernel_should_be_exact(("amx_int8",))
        assert not expected, f"oneDNN ran no matmul in {precision} on a CPU and torch where it should"
        pytest.skip(f"oneDNN ran no matmul in {precision} here (another kernel sums)")
    for weight, rows in rows_by_weight.items():
        assert rows == {bucket_rows(count) for count in rows}, (weight, sorted(rows))
    step_rows = max(rows_by_weight.values(), key=len)
    assert len(step_rows) > 8, sorted(step_rows)  # the docs did bring many row counts


def _rows_by_weight(log: str) -> dict:
    """{(in features, out features): row counts} of the inner products and matmuls in a oneDNN log."""
    found: dict = {}
    for line in log.splitlines():
        if ",exec," not in line:
            continue
        product = re.search(r"mb(\d+)ic(\d+)oc(\d+)", line)
        matmul = re.search(r",(\d+)x(\d+):(\d+)x(\d+),", line)
        if product:
            rows, shape = int(product[1]), (int(product[2]), int(product[3]))
        elif matmul:
            rows, shape = int(matmul[1]), (int(matmul[2]), int(matmul[4]))
        else:
            continue
        found.setdefault(shape, set()).add(rows)
    return found
